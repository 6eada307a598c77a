"""`report_to: tensorboard` end to end, read back by TensorBoard's own code (the tensorboard package
from PyPI, in the oracle venv; skipped when it is not installed).

A small MLP (tests/cli/configs/tiny_sequential.json) is trained with a fresh seed, random
logging_steps and eval_steps, and TensorBoard logging into a given logging_dir. Then:
  - every record of every event file passes TensorBoard's record reader (CRC-32C of length and
    data), and the first event of each file is file_version "brain.Event:2";
  - TensorBoard's EventAccumulator gives exactly the scalars of trainer_state.json's log_history
    (loss, learning_rate, grad_norm, epoch, the eval metrics, the training summary) plus the final
    evaluation (eval_results.json, logged after trainer_state.json was written: its entries come
    from log.jsonl, which must agree with both), under Hugging Face's rewrite_logs tags, at every
    logged step, each equal to the logged value rounded to float32 (simple_value is a float32),
    and no others;
  - the "args" text is the training arguments (training_args.json) as json.dumps(indent=2), the
    "model_config" text the config's model as json.dumps(indent=2, sort_keys=True) + newline, and
    both summaries (and the scalars) are byte for byte what PyTorch's SummaryWriter, which Hugging
    Face's TensorBoardCallback uses, writes for the same tag and value;
  - the HParams plugin's session_start_info, parsed by the plugin's own metadata module, holds the
    arguments, and session_end_info says the run succeeded; the plugin's own backend (what its tab
    shows) lists the run with those hyperparameters, finished, with the last logged values as metrics;
  - without logging_dir, the files go to output_dir/runs/<Mon>DD_HH-MM-SS_<hostname> (one directory
    for the run and its final evaluation), as Hugging Face's default;
  - an unusable logging_dir fails the run with a message naming it."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from common import check, CTRAINER, finish, np, require_built_with, require_fashion_mnist, RNG, TINY_CONFIG

require_built_with("TensorBoard")  # CTRAINER_TENSORBOARD=OFF, or AUTO without protobuf-c

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard import context as tb_context
    from tensorboard.backend.event_processing import data_provider as tb_data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups
    from tensorboard.plugins.hparams import metadata as hp_metadata
except ImportError as e:
    print(f"skipped: the tensorboard package is not installed ({e}); "
          "scripts/oracle-venv.sh installs it into build/oracle-venv when PyPI can be reached")
    sys.exit(77)

DATA = require_fashion_mnist()

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = TINY_CONFIG
SEED = int(RNG.integers(0, 2**31))
ENV = {**os.environ, "OMP_NUM_THREADS": "2"}


def ctrainer(*args, expect=0):
    p = subprocess.run([CTRAINER, *args], capture_output=True, text=True, env=ENV)
    if p.returncode != expect:
        check(False, f"ctrainer {' '.join(args)} exited {p.returncode}, expected {expect}: {p.stderr.strip()[-2000:]}")
        finish()
    return p


def rewrite(key):
    """Hugging Face's rewrite_logs, for one key."""
    if key.startswith("eval_"):
        return "eval/" + key[5:]
    if key.startswith("test_"):
        return "test/" + key[5:]
    return "train/" + key


def event_files(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith("events.out.tfevents."))


def read_records(path):
    """Every Event of a file through TensorBoard's record reader, which checks both CRCs."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return out
        except tb_errors.DataLossError as e:
            check(False, f"{path}: {e}")
            return out
        out.append(event_pb2.Event.FromString(reader.record()))


def accumulate(d):
    ea = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    ea.Reload()
    return ea


def hparams_session_groups(logdir):
    """What TensorBoard's HParams tab lists for logdir: the plugin's own ListSessionGroups handler
    over TensorBoard's data provider, as the web page asks for it (every status)."""
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    ctx = base_plugin.TBContext(logdir=logdir, multiplexer=mux,
                                data_provider=tb_data_provider.MultiplexerDataProvider(mux, logdir))
    req = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=100, allowed_statuses=[
        api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING])
    return list_session_groups.Handler(tb_context.RequestContext(), backend_context.Context(ctx), "", req).run()


def torch_summaries():
    """PyTorch's summary builders (what HF's TensorBoardCallback writes through), or None."""
    try:
        from torch.utils.tensorboard import summary as ts
        return ts
    except Exception as e:  # an old torch with a new tensorboard: the comparison is left out, said so
        print(f"note: torch.utils.tensorboard unavailable ({e}); byte comparison with SummaryWriter left out")
        return None


with tempfile.TemporaryDirectory() as d:
    # logging_dir one level below the directory TensorBoard is pointed at, as output_dir/runs/<run>
    # (non-ASCII and a tab in output_dir: the args text must escape them as json.dumps does)
    out, tb = os.path.join(d, "train-caf\u00e9\t\u2603\U0001f600"), os.path.join(d, "tb", "run")
    logging_steps = int(RNG.integers(2, 9))
    eval_steps = int(RNG.integers(8, 33))
    t0 = time.time()
    ctrainer("train", CONFIG, "--output_dir", out, "--seed", str(SEED), "--save_strategy", "no",
             "--report_to", '["jsonl", "tensorboard"]', "--logging_dir", tb, "--logging_steps", str(logging_steps),
             "--eval_strategy", "steps", "--eval_steps", str(eval_steps))
    t1 = time.time()
    state = json.load(open(os.path.join(out, "trainer_state.json")))
    final_eval = json.load(open(os.path.join(out, "eval_results.json")))
    saved_args = json.load(open(os.path.join(out, "training_args.json")))
    model_spec = json.load(open(CONFIG))["model"]
    files = event_files(tb)
    records = {f: read_records(f) for f in files}
    ea = accumulate(tb)

    # --- the files and their records -----------------------------------------------------------------
    # Training writes one file and closes it at train end; the final evaluation logs after that and
    # opens a second one in the same directory, as Hugging Face's callback does.
    check(len(files) == 2, f"{len(files)} event files in logging_dir: {files}")
    host, pid_re = re.escape(socket.gethostname()), r"\d+"
    for f in files:
        m = re.fullmatch(rf"events\.out\.tfevents\.(\d{{10}})\.{host}\.{pid_re}\.\d+", os.path.basename(f))
        check(m is not None and t0 - 2 <= int(m.group(1)) <= t1 + 2, f"event file name {os.path.basename(f)}")
        evs = records[f]
        check(len(evs) > 0 and evs[0].file_version == "brain.Event:2", f"{f}: first event {evs[:1]}")
        check(all(t0 - 2 <= e.wall_time <= t1 + 2 for e in evs), f"{f}: wall times outside the run")

    # --- scalars: trainer_state.json's log_history (+ the final evaluation), nothing else ----------------
    # What was logged after trainer_state.json was written (the final evaluation, one entry per eval
    # set) comes from log.jsonl, which records every on_log entry; its entries before that must be
    # log_history's, and the final ones together must be eval_results.json.
    jsonl = [json.loads(line) for line in open(os.path.join(out, "log.jsonl"))]
    hist = state["log_history"]
    check(jsonl[:len(hist)] == hist, "log.jsonl does not start with trainer_state.json's log_history")
    post = jsonl[len(hist):]
    merged = {}
    for e in post:
        check(e["step"] == state["global_step"], f"a log after training at step {e['step']}")
        merged.update({k: v for k, v in e.items() if k != "step"})
    check(len(post) == 2 and merged == final_eval, f"the logs after training {post} are not eval_results.json")
    entries = hist + post
    want = {}
    for e in entries:
        for k, v in e.items():
            if k != "step" and isinstance(v, (int, float)):
                want.setdefault(rewrite(k), []).append((e["step"], v))
    got_tags = set(ea.Tags()["scalars"])
    check(got_tags == set(want), f"scalar tags: missing {sorted(set(want) - got_tags)}, extra {sorted(got_tags - set(want))}")
    for expected_tag in ("train/loss", "train/learning_rate", "train/grad_norm", "train/epoch", "eval/small_loss",
                         "eval/small_accuracy", "eval/other_top_3_accuracy", "train/train_loss", "train/total_flos"):
        check(expected_tag in got_tags, f"no scalar {expected_tag}")
    n_values = 0
    for tag in sorted(got_tags & set(want)):
        got = [(s.step, s.value) for s in ea.Scalars(tag)]
        exp = [(step, float(np.float32(v))) for step, v in want[tag]]
        n_values += len(exp)
        diff = [(g, x) for g, x in zip(got, exp) if g != x]
        check(got == exp, f"{tag}: TensorBoard has {len(got)} values, expected {len(exp)}; first differences {diff[:4]}"
                          f" (TensorBoard's {got[len(exp):][:3]} beyond)")
    loss_steps = [s.step for s in ea.Scalars("train/loss")] if "train/loss" in got_tags else []
    check(loss_steps == list(range(logging_steps, state["global_step"] + 1, logging_steps)),
          f"train/loss at steps {loss_steps} (logging_steps {logging_steps})")
    eval_at = [s.step for s in ea.Scalars("eval/small_loss")] if "eval/small_loss" in got_tags else []
    # every eval_steps during training, then the final evaluation at the last step
    check(eval_at == list(range(eval_steps, state["global_step"] + 1, eval_steps)) + [state["global_step"]],
          f"eval/small_loss at steps {eval_at} (eval_steps {eval_steps})")
    print(f"{len(got_tags)} scalar tags, {n_values} values checked (logging_steps {logging_steps}, eval_steps {eval_steps})")

    # --- text summaries: the arguments and the model config ------------------------------------------
    texts = ea.Tags()["tensors"]
    for tag in ("args/text_summary", "model_config/text_summary"):
        check(tag in texts and ea.SummaryMetadata(tag).plugin_data.plugin_name == "text", f"text summary {tag}")
    args_text = model_text = ""
    if "args/text_summary" in texts:
        t = ea.Tensors("args/text_summary")
        check(len(t) == 1 and t[0].step == 0, f"args written {len(t)} times")
        check(list(t[0].tensor_proto.tensor_shape.dim[i].size for i in range(len(t[0].tensor_proto.tensor_shape.dim))) == [1],
              "args tensor shape [1]")
        args_text = t[0].tensor_proto.string_val[0].decode()
        parsed = json.loads(args_text)
        check(parsed == saved_args, "the args text differs from training_args.json: " +
              str({k: (parsed.get(k), saved_args.get(k)) for k in set(parsed) | set(saved_args) if parsed.get(k) != saved_args.get(k)}))
        check(args_text == json.dumps(parsed, indent=2), "the args text is not json.dumps(indent=2) of itself")
        check(parsed["logging_dir"] == tb and parsed["report_to"] == ["jsonl", "tensorboard"] and parsed["seed"] == SEED,
              f"args: logging_dir {parsed.get('logging_dir')}, report_to {parsed.get('report_to')}")
    if "model_config/text_summary" in texts:
        model_text = ea.Tensors("model_config/text_summary")[0].tensor_proto.string_val[0].decode()
        check(json.loads(model_text) == model_spec, f"model_config text {model_text[:200]}")
        check(model_text == json.dumps(model_spec, indent=2, sort_keys=True) + "\n",
              "model_config is not PretrainedConfig.to_json_string's format")

    # --- the same bytes as PyTorch's SummaryWriter (Hugging Face's writer) ------------------------------
    ts = torch_summaries()
    if ts is not None:
        first = records[files[0]]
        by_tag = {}
        for e in first:
            for v in e.summary.value:
                by_tag.setdefault(v.tag, v)
        refs = [("train/loss", ts.scalar("train/loss", state["log_history"][0]["loss"]).value[0])]
        if args_text:
            refs.append(("args/text_summary", ts.text("args", args_text).value[0]))
        if model_text:
            refs.append(("model_config/text_summary", ts.text("model_config", model_text).value[0]))
        for tag, ref in refs:
            mine = by_tag.get(tag)
            check(mine is not None and mine.SerializeToString() == ref.SerializeToString(),
                  f"{tag}: the first summary {str(mine)[:300]} differs from SummaryWriter's {str(ref)[:300]}")

    # --- the HParams plugin ----------------------------------------------------------------------------
    hp_events = [(v, e) for f in files for e in records[f] for v in e.summary.value if v.tag.startswith("_hparams_/")]
    starts = [v for v, _ in hp_events if v.tag == hp_metadata.SESSION_START_INFO_TAG]
    ends = [v for v, _ in hp_events if v.tag == hp_metadata.SESSION_END_INFO_TAG]
    check(len(starts) == 1 and len(ends) == 1, f"{len(starts)} session starts, {len(ends)} ends")
    # numbers, booleans and strings as such, lists and objects as compact JSON, nulls left out
    want_hp = {k: v if isinstance(v, (bool, str)) else float(v) if isinstance(v, (int, float))
               else json.dumps(v, separators=(",", ":")) for k, v in saved_args.items() if v is not None}
    if starts:
        check(starts[0].metadata.plugin_data.plugin_name == hp_metadata.PLUGIN_NAME, "session start: plugin name")
        info = hp_metadata.parse_session_start_info_plugin_data(starts[0].metadata.plugin_data.content)
        hp = {k: getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}
        check(hp == want_hp, "hparams differ from the arguments: " +
              str({k: (hp.get(k), want_hp.get(k)) for k in set(hp) | set(want_hp) if hp.get(k) != want_hp.get(k)}))
        check(t0 - 2 <= info.start_time_secs <= t1 + 2, f"start_time_secs {info.start_time_secs}")
    if ends:
        info = hp_metadata.parse_session_end_info_plugin_data(ends[0].metadata.plugin_data.content)
        check(info.status == api_pb2.STATUS_SUCCESS and t0 - 2 <= info.end_time_secs <= t1 + 2, f"session end {info}")
    # The HParams tab: one session ("run") with the arguments, finished, and the last value of every
    # scalar as its metrics.
    groups = hparams_session_groups(os.path.dirname(tb)).session_groups
    check(len(groups) == 1 and groups[0].name == "run" and len(groups[0].sessions) == 1,
          f"HParams session groups: {[g.name for g in groups]}")
    if len(groups) == 1 and len(groups[0].sessions) == 1:
        g, sess = groups[0], groups[0].sessions[0]
        check(sess.status == api_pb2.STATUS_SUCCESS, f"HParams session status {sess.status}")
        shown = {k: getattr(v, v.WhichOneof("kind")) for k, v in g.hparams.items()}
        check(shown == want_hp, "the HParams tab's hyperparameters differ from the arguments")
        metrics_shown = {m.name.tag: (m.training_step, m.value) for m in sess.metric_values}
        last = {tag: (v[-1][0], float(np.float32(v[-1][1]))) for tag, v in want.items()}
        check(metrics_shown == last, "the HParams tab's metrics are not the last logged values: " +
              str({k: (metrics_shown.get(k), last.get(k)) for k in set(last) | set(metrics_shown)
                   if metrics_shown.get(k) != last.get(k)}))

    # --- the default logging_dir: output_dir/runs/<Mon>DD_HH-MM-SS_<hostname> ----------------------------
    out2 = os.path.join(d, "default")
    ctrainer("train", CONFIG, "--output_dir", out2, "--seed", str(SEED), "--save_strategy", "no",
             "--report_to", "tensorboard", "--max_steps", "4", "--logging_steps", "1", "--eval_strategy", "no")
    runs = os.listdir(os.path.join(out2, "runs")) if os.path.isdir(os.path.join(out2, "runs")) else []
    check(len(runs) == 1 and re.fullmatch(rf"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\d\d_\d\d-\d\d-\d\d_{host}",
                                          runs[0]) is not None, f"runs/ holds {runs}")
    if len(runs) == 1:
        rd = os.path.join(out2, "runs", runs[0])
        check(len(event_files(rd)) == 2, f"{rd}: {event_files(rd)}")
        ea2 = accumulate(rd)
        steps = [s.step for s in ea2.Scalars("train/loss")] if "train/loss" in ea2.Tags()["scalars"] else []
        check(steps == [1, 2, 3, 4], f"default logging_dir: train/loss at {steps}")
        st2 = json.load(open(os.path.join(out2, "trainer_state.json")))
        got = [s.value for s in ea2.Scalars("train/loss")] if steps else []
        check(got == [float(np.float32(e["loss"])) for e in st2["log_history"] if "loss" in e], "default run's losses")
        has_args = "args/text_summary" in ea2.Tags()["tensors"]
        args2 = json.loads(ea2.Tensors("args/text_summary")[0].tensor_proto.string_val[0].decode()) if has_args else {}
        check(args2.get("logging_dir") == rd, f"the args text shows the resolved logging_dir: {args2.get('logging_dir')}")

    # --- an unusable logging_dir ------------------------------------------------------------------------
    blocker = os.path.join(d, "not_a_dir")
    open(blocker, "w").close()
    bad = os.path.join(blocker, "tb")
    p = ctrainer("train", CONFIG, "--output_dir", os.path.join(d, "bad"), "--report_to", "tensorboard",
                 "--logging_dir", bad, "--max_steps", "2", "--save_strategy", "no", expect=1)
    check(f"cannot use logging_dir '{bad}'" in p.stderr, f"the error names the logging_dir: {p.stderr.strip()[-500:]}")
finish()
