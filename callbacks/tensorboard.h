/* TensorBoard event files: a writer of TensorFlow's Event records, and Hugging Face's
 * TensorBoardCallback on top of it (report_to "tensorboard").
 *
 * An event file is a sequence of TFRecords (uint64 length, little-endian; masked CRC-32C of those
 * 8 bytes; the serialized tensorflow.Event; masked CRC-32C of it; mask(c) = ((c >> 15) | (c << 17))
 * + 0xa282ead8), whose first record is the Event with file_version "brain.Event:2". The messages are
 * encoded by protobuf-c from callbacks/tensorboard.proto and callbacks/tensorboard_hparams.proto
 * (TensorFlow's and TensorBoard's field numbers). The file is named as TensorBoard's and PyTorch's
 * writers name theirs, events.out.tfevents.<unix seconds, 10 digits>.<hostname>.<pid>.<n> (n counts
 * the files this process opened), so TensorBoard finds it in its log directory.
 *
 * What is written is what Hugging Face's TensorBoardCallback writes through PyTorch's SummaryWriter:
 * each logged number as a simple_value scalar under rewrite_logs' tag ("eval_loss" -> "eval/loss",
 * "test_x" -> "test/x", anything else "train/x") at the global step; logged strings, the training
 * arguments ("args") and the model config ("model_config") as text-plugin summaries tagged
 * "<tag>/text_summary" (a DT_STRING tensor of one element). Beyond Hugging Face, the arguments also
 * go to TensorBoard's HParams plugin ("_hparams_/session_start_info" at train begin,
 * "_hparams_/session_end_info" at train end), so runs can be compared in its table.
 *
 * TensorBoard support is optional at build time (CTRAINER_TENSORBOARD, protobuf-c). Built without
 * it, this API is still there: ct_tb_protobuf_c_version returns NULL, and every function below that
 * returns a ct_status (opening a writer, creating the callback, ...) answers CT_ERR_UNSUPPORTED with
 * a message saying how to build it in; ct_tfrecord_mask_crc, ct_tb_wall_time and ct_tb_rewrite_key
 * work in every build. */
#ifndef CT_TENSORBOARD_H
#define CT_TENSORBOARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "callbacks/callback.h"
#include "core/status.h"

#define CT_TENSORBOARD_CALLBACK_NAME "TensorBoardCallback"

/* The version of protobuf-c this ctrainer writes event files with ("1.4.1"), or NULL when it was
 * built without TensorBoard support. */
const char *ct_tb_protobuf_c_version(void);

/* TFRecord's CRC mask, and the size of a record's framing around its data (8 + 4 + 4). */
uint32_t ct_tfrecord_mask_crc(uint32_t crc);
#define CT_TFRECORD_OVERHEAD 16

typedef struct ct_tb_writer ct_tb_writer;

/* Creates logdir (and its parents) and a new event file in it, and writes the file_version event.
 * CT_ERR_IO naming the directory or file when it cannot. */
ct_status ct_tb_writer_open(const char *logdir, ct_tb_writer **out);
/* The event file's path. */
const char *ct_tb_writer_path(const ct_tb_writer *w);
/* One scalar (stored as float32, TensorBoard's simple_value). wall_time: seconds since the epoch. */
ct_status ct_tb_writer_add_scalar(ct_tb_writer *w, const char *tag, double value, int64_t step, double wall_time);
/* A text-plugin summary, as SummaryWriter.add_text: the tag gets "/text_summary" appended. */
ct_status ct_tb_writer_add_text(ct_tb_writer *w, const char *tag, const char *text, int64_t step, double wall_time);
/* The HParams plugin's session start: every member of `hparams` (a JSON object) that is a number,
 * boolean or string, as such; lists and objects as their compact JSON text; nulls are left out. */
ct_status ct_tb_writer_add_hparams(ct_tb_writer *w, const json_t *hparams, double wall_time);
/* The HParams plugin's session end: success or failure, at wall_time. */
ct_status ct_tb_writer_add_session_end(ct_tb_writer *w, bool success, double wall_time);
/* Pushes what was written to the operating system (a crash after it loses nothing). */
ct_status ct_tb_writer_flush(ct_tb_writer *w);
/* Flushes, closes and frees w (NULL is fine); the error, if any, names the file. */
ct_status ct_tb_writer_close(ct_tb_writer *w);

/* Seconds since the epoch, with the clock's resolution (an Event's wall_time). */
double ct_tb_wall_time(void);
/* Hugging Face's rewrite_logs for one key: "eval_loss" -> "eval/loss", "test_acc" -> "test/acc",
 * "loss" -> "train/loss". Cut to n - 1 characters. */
void ct_tb_rewrite_key(const char *key, char *out, size_t n);
/* Hugging Face's default logging_dir: output_dir/runs/<%b%d_%H-%M-%S>_<hostname>, local time. */
ct_status ct_tb_default_logdir(const char *output_dir, char *out, size_t n);

/* Hugging Face's TensorBoardCallback (see above). Writes only on the world's process zero, into
 * args->logging_dir, or the default above when it is unset, resolved when training starts (or at
 * the first log outside training). Flushes after every log; closes the file at train end. */
ct_status ct_tensorboard_callback_create(ct_callback **out);

#endif
