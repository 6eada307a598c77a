/* Checkpoint snapshots, the synchronous save and the asynchronous writer (see checkpoint_async.h).
 *
 * The writer thread touches only its snapshot and the parameter store's metadata (names, shapes,
 * offsets: fixed once the model is built); everything it reads was copied on the training thread
 * before the hand-over, under the saver's mutex, and the training thread reuses those copies only
 * after the writer said it is done, under the same mutex. Signals are blocked in the writer, so
 * SIGINT/SIGTERM reach the training thread (and no write of the writer is interrupted). */
#define _GNU_SOURCE /* nftw */
#include "checkpoint/checkpoint_async.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/fs.h"
#include "core/log.h"
#include "dist/zero.h"
#include "model/model_io.h"
#include "trainer/trainer_impl.h"

/* The flags of ct_write_json_file and ct_trainer_state_save: the same bytes as the files written
 * outside checkpoints. */
#define JSON_FLAGS (JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17))
#define MSG_CAP 2048
#define WRITER_NICE 10

/* --- snapshots ---------------------------------------------------------------------------------- */

typedef struct snapshot {
    int64_t step;
    char dir[4096], tmp[4200];
    char prev_best[1024]; /* best_model_checkpoint before this save (restored if it fails) */
    int rank;
    bool shared;        /* rank 0: the files every process shares */
    bool owns_weights;  /* values and buffers are copies owned here (else views of the live ones) */
    bool owns_optim;    /* optim.state are copies owned here */
    const ct_model *model; /* names, shapes and offsets only */
    ct_tensor values, buffers;
    json_t *model_spec;    /* a private copy of the run config's "model" (NULL: none) */
    char *training_args, *run_config, *trainer_state, *scheduler, *progress;
    bool has_optimizer;
    ct_optimizer_snapshot optim;
    ct_optimizer *gathered; /* ZeRO-1: the full state gathered to rank 0; optim points into it */
} snapshot;

static void snapshot_free(snapshot *s) {
    if (!s) return;
    if (s->owns_weights) {
        ct_tensor_free(&s->values);
        ct_tensor_free(&s->buffers);
    }
    if (s->owns_optim)
        for (int i = 0; i < s->optim.n_state; i++) ct_tensor_free(&s->optim.state[i]);
    ct_optimizer_destroy(s->gathered);
    json_decref(s->model_spec);
    free(s->training_args);
    free(s->run_config);
    free(s->trainer_state);
    free(s->scheduler);
    free(s->progress);
    free(s);
}

/* dst = a host copy of src; spare's memory is taken over when it fits (the previous save's copy:
 * no allocation, no page faults in the steady state). */
static ct_status host_copy(ct_tensor *dst, const ct_tensor *src, ct_tensor *spare) {
    if (spare && spare->data && spare->dtype == src->dtype && ct_tensor_numel(spare) == ct_tensor_numel(src)) {
        *dst = ct_tensor_view(spare->data, src->dtype, CT_CPU, src->ndim, src->shape);
        spare->data = NULL;
    } else {
        CT_TRY(ct_tensor_alloc(dst, src->dtype, CT_CPU, src->ndim, src->shape));
    }
    return ct_tensor_copy_to(dst, src);
}

static char *dump(const json_t *v) { return v ? json_dumps(v, JSON_FLAGS) : NULL; }

/* trainer_state.json as ct_trainer_state_save writes it (with a final newline). */
static char *state_text(const ct_trainer_state *st) {
    json_t *o;
    if (ct_trainer_state_to_json(st, &o) != CT_OK) return NULL;
    char *text = dump(o);
    json_decref(o);
    size_t n = text ? strlen(text) : 0;
    char *out = text ? realloc(text, n + 2) : NULL;
    if (!out) {
        free(text);
        return NULL;
    }
    out[n] = '\n';
    out[n + 1] = '\0';
    return out;
}

#define NOMEM_UNLESS(p) ((p) ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory"))

/* Rank 0's part: model, arguments, trainer state and (unless save_only_model) the optimizer and
 * scheduler. copy: host copies of the tensors (spare: the previous snapshot, whose memory is reused). */
static ct_status take_shared(ct_trainer *t, snapshot *s, bool copy, snapshot *spare) {
    const ct_param_store *ps = &t->model->params;
    s->model = t->model;
    if (copy) {
        s->owns_weights = true;
        bool reuse = spare && spare->owns_weights;
        CT_TRY(host_copy(&s->values, &ps->values, reuse ? &spare->values : NULL));
        CT_TRY(host_copy(&s->buffers, &ps->buffers, reuse ? &spare->buffers : NULL));
    } else {
        s->values = ps->values;
        s->buffers = ps->buffers;
    }
    const json_t *spec = t->config ? json_object_get(t->config, "model") : NULL;
    if (spec) CT_TRY(NOMEM_UNLESS(s->model_spec = json_deep_copy(spec)));
    json_t *args;
    CT_TRY(ct_training_args_to_json(&t->args, &args));
    s->training_args = dump(args);
    json_decref(args);
    CT_TRY(NOMEM_UNLESS(s->training_args));
    if (t->config) CT_TRY(NOMEM_UNLESS(s->run_config = dump(t->config)));
    CT_TRY(ct_trainer_store_callback_state(t));
    CT_TRY(NOMEM_UNLESS(s->trainer_state = state_text(&t->state)));
    if (t->args.save_only_model) return CT_OK;
    CT_TRY(NOMEM_UNLESS(s->scheduler = ct_scheduler_json_text(t->lr_scheduler)));
    /* a ZeRO-1 shard optimizer's state is gathered by a collective: see take_snapshot */
    if (ct_trainer_uses_zero1(t)) return CT_OK;
    ct_optimizer_snapshot live;
    CT_TRY(ct_optimizer_snapshot_view(t->optimizer, &live));
    s->optim = live;
    s->has_optimizer = true;
    if (!copy) return CT_OK;
    s->owns_optim = true;
    for (int i = 0; i < live.n_state; i++) s->optim.state[i] = (ct_tensor){0};
    for (int i = 0; i < live.n_state; i++)
        CT_TRY(host_copy(&s->optim.state[i], &live.state[i],
                         spare && spare->owns_optim && i < spare->optim.n_state ? &spare->optim.state[i] : NULL));
    return CT_OK;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static ct_status remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return ct_error(CT_ERR_IO, "cannot delete '%s': %s", path, strerror(errno));
    return CT_OK;
}

/* Rank 0, before any process writes: a stale temporary directory (of a crash, or of a failed save
 * of this step) goes, a fresh one is made. */
static ct_status prepare_tmp(const char *tmp) {
    CT_TRY(remove_tree(tmp));
    return ct_make_dirs(tmp);
}

/* Collective: CT_OK on every process only if s is CT_OK on every process; a process that failed
 * returns its own error, the others one that says another process failed. *comm_failed (may be
 * NULL) is set when the agreement itself failed: then the processes may not agree. */
static ct_status agree(ct_trainer *t, ct_status s, const char *dir, const char *what, bool *comm_failed) {
    int64_t failed = s != CT_OK;
    ct_status r = ct_comm_all_reduce_i64(t->comm, &failed, 1, CT_MAX);
    if (r != CT_OK && comm_failed) *comm_failed = true;
    if (s != CT_OK) return s;
    CT_TRY(r);
    if (failed) return ct_error(CT_ERR_IO, "%s: another process failed while %s; nothing was committed", dir, what);
    return CT_OK;
}

/* Collective (the ZeRO-1 gather and the agreement): every process's snapshot of this step, and the
 * temporary directory made. *out is NULL on failure (on every process). */
static ct_status take_snapshot(ct_trainer *t, const char *dir, const char *tmp, bool copy, snapshot *spare,
                               snapshot **out, bool *comm_failed, bool *own) {
    *out = NULL;
    snapshot *s = calloc(1, sizeof *s);
    if (!s) return ct_error(CT_ERR_NOMEM, "save of %s: out of memory", dir);
    s->step = t->state.global_step;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->tmp, sizeof s->tmp, "%s", tmp);
    s->rank = t->rank;
    s->shared = t->rank == 0;
    bool full = !t->args.save_only_model;
    ct_status st = s->shared ? take_shared(t, s, copy, spare) : CT_OK;
    if (st == CT_OK && full) st = NOMEM_UNLESS(s->progress = ct_checkpoint_progress_text(t));
    /* Every process enters the gather, even after a local failure, so that none is left waiting;
     * the gathered state is a copy already (on rank 0). */
    if (full && ct_trainer_uses_zero1(t)) {
        ct_status g = ct_zero1_gather_state(t->optimizer, t->comm, 0, &s->gathered);
        if (g == CT_OK && s->gathered) {
            g = ct_optimizer_snapshot_view(s->gathered, &s->optim);
            s->has_optimizer = g == CT_OK;
        }
        if (st == CT_OK) st = g;
    }
    if (st == CT_OK && s->shared) st = prepare_tmp(tmp);
    if (st != CT_OK) st = ct_error_prefix(st, "save of %s: ", dir);
    *own = st != CT_OK;
    if (t->world_size > 1) st = agree(t, st, dir, "taking its snapshot", comm_failed);
    if (st != CT_OK) {
        snapshot_free(s);
        return st;
    }
    *out = s;
    return CT_OK;
}

/* --- writing (any thread; no communication) ----------------------------------------------------- */

static ct_status write_text(const snapshot *s, const char *name, const char *text) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->tmp, name);
    return ct_checkpoint_write_text(path, text);
}

/* This process's files into the temporary directory. */
static ct_status write_part(const snapshot *s) {
    char path[4400];
    if (s->shared) {
        snprintf(path, sizeof path, "%s/model.h5", s->tmp);
        CT_TRY(ct_model_save_h5_values(s->model, &s->values, &s->buffers, s->model_spec, path));
        CT_TRY(write_text(s, "training_args.json", s->training_args));
        if (s->run_config) CT_TRY(write_text(s, "run_config.json", s->run_config));
        CT_TRY(write_text(s, "trainer_state.json", s->trainer_state));
        if (s->has_optimizer) {
            snprintf(path, sizeof path, "%s/optimizer.h5", s->tmp);
            CT_TRY(ct_optimizer_snapshot_save_h5(&s->optim, path));
        }
        if (s->scheduler) CT_TRY(write_text(s, "scheduler.json", s->scheduler));
    }
    if (s->progress) {
        char name[64];
        snprintf(name, sizeof name, "rng_state_%d.json", s->rank);
        CT_TRY(write_text(s, name, s->progress));
    }
    return CT_OK;
}

/* Rank 0, once every process's part is written: seal and rename. */
static ct_status commit(const snapshot *s) {
    CT_TRY(ct_checkpoint_write_manifest(s->tmp));
    return ct_checkpoint_commit(s->tmp, s->dir);
}

/* --- the saver: one writer thread per trainer --------------------------------------------------- */

typedef struct ct_async_saver ct_async_saver;

enum { PHASE_IDLE, PHASE_PARTS, PHASE_COMMIT };
enum { WORK_NONE, WORK_PART, WORK_COMMIT };

struct ct_async_saver {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started;
    /* shared with the writer, under mu */
    bool quit;
    int work;        /* handed over, not yet taken */
    bool busy;       /* the writer is working */
    bool commit_too; /* one process: the writer commits right after writing */
    snapshot *job;
    char **doomed; /* directories rotation renamed aside, for the writer to delete (before any work) */
    int n_doomed;
    bool part_done, commit_done;
    ct_status part_status, commit_status;
    char part_msg[MSG_CAP], commit_msg[MSG_CAP];
    /* the training thread's */
    int phase;
    snapshot *spare;      /* the last save's snapshot, whose memory the next one reuses */
    double finishing_ms;  /* the training thread's time in polls and drains for the save in flight */
    double round_start;   /* when the current poll or drain round began */
    char **doomed_next;   /* rotation's victims, for the writer once the save in flight is over */
    int n_doomed_next;
};

static void *writer_main(void *arg) {
    ct_async_saver *sv = arg;
    /* Below the training threads: the writer mostly waits for the disk, and where the cores are all
     * busy with OpenMP's team a preempted team member stalls every barrier of the step. Linux takes
     * a thread's id here; failure (not permitted) only leaves the priority as it was. */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), WRITER_NICE);
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (sv->work == WORK_NONE && !sv->doomed && !sv->quit) pthread_cond_wait(&sv->cv, &sv->mu);
        if (sv->doomed) {
            /* committed checkpoints that rotation dropped, already out of every listing: a failure
             * only leaves the space taken */
            char **doomed = sv->doomed;
            int n = sv->n_doomed;
            sv->busy = true;
            pthread_mutex_unlock(&sv->mu);
            for (int i = 0; i < n; i++)
                if (remove_tree(doomed[i]) != CT_OK) ct_log_warning("rotation: %s", ct_last_error());
            ct_checkpoint_list_free(doomed, n);
            pthread_mutex_lock(&sv->mu);
            sv->doomed = NULL;
            sv->n_doomed = 0;
            sv->busy = false;
            pthread_cond_broadcast(&sv->cv);
            continue;
        }
        if (sv->work == WORK_NONE) break;
        int work = sv->work;
        sv->work = WORK_NONE;
        sv->busy = true;
        snapshot *job = sv->job;
        bool commit_too = sv->commit_too;
        pthread_mutex_unlock(&sv->mu);
        ct_status ps = CT_OK, cs = CT_OK;
        char pmsg[MSG_CAP] = "", cmsg[MSG_CAP] = "";
        bool committed = false;
        if (work == WORK_PART) {
            ps = write_part(job);
            if (ps != CT_OK) snprintf(pmsg, sizeof pmsg, "asynchronous save of %s: %s", job->dir, ct_last_error());
        }
        if (ps == CT_OK && (work == WORK_COMMIT || commit_too)) {
            cs = commit(job);
            if (cs != CT_OK) snprintf(cmsg, sizeof cmsg, "asynchronous save of %s: %s", job->dir, ct_last_error());
            committed = true;
        }
        pthread_mutex_lock(&sv->mu);
        if (work == WORK_PART) {
            sv->part_done = true;
            sv->part_status = ps;
            memcpy(sv->part_msg, pmsg, sizeof pmsg);
        }
        if (committed) {
            sv->commit_done = true;
            sv->commit_status = cs;
            memcpy(sv->commit_msg, cmsg, sizeof cmsg);
        }
        sv->busy = false;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

static ct_status saver_get(ct_trainer *t, ct_async_saver **out) {
    if (t->saver) {
        *out = t->saver;
        return CT_OK;
    }
    ct_async_saver *sv = calloc(1, sizeof *sv);
    if (!sv) return ct_error(CT_ERR_NOMEM, "save_async: out of memory");
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    /* The thread inherits the mask: every signal blocked there goes to the training thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&sv->thread, NULL, writer_main, sv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&sv->cv);
        pthread_mutex_destroy(&sv->mu);
        free(sv);
        return ct_error(CT_ERR_STATE, "save_async: cannot start the writer thread: %s", strerror(rc));
    }
    sv->started = true;
    t->saver = sv;
    *out = sv;
    return CT_OK;
}

static void hand_over(ct_trainer *t, ct_async_saver *sv, snapshot *s) {
    pthread_mutex_lock(&sv->mu);
    /* the writer may still be deleting what the last rotation dropped: it starts on this save then */
    sv->job = s;
    sv->part_done = sv->commit_done = false;
    sv->part_status = sv->commit_status = CT_OK;
    sv->part_msg[0] = sv->commit_msg[0] = '\0';
    sv->commit_too = t->world_size == 1;
    sv->work = WORK_PART;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    sv->phase = t->world_size == 1 ? PHASE_COMMIT : PHASE_PARTS;
}

/* Waits until the writer has nothing in hand (no collective). */
static void wait_writer_idle(ct_async_saver *sv) {
    pthread_mutex_lock(&sv->mu);
    while (sv->busy || sv->work != WORK_NONE || sv->doomed) pthread_cond_wait(&sv->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
}

static void hand_deletions(ct_async_saver *sv);

/* The save in flight is over (committed, or failed): its snapshot becomes the spare. */
static void finish_job(ct_async_saver *sv, bool committed) {
    wait_writer_idle(sv);
    sv->finishing_ms += (ct_trainer_now() - sv->round_start) * 1e3;
    if (sv->job)
        ct_log_debug("%s: %s; after the hand-over the training thread spent %.2f ms on it (polls, waits, "
                     "agreement, rotation) [training thread: %.3f ms]",
                     sv->job->dir, committed ? "committed" : "not committed", sv->finishing_ms, sv->finishing_ms);
    sv->finishing_ms = 0;
    snapshot_free(sv->spare);
    sv->spare = sv->job;
    sv->job = NULL;
    sv->phase = PHASE_IDLE;
    hand_deletions(sv);
}

/* Rotation after a commit, decided on the training thread with the best checkpoint known now (an
 * asynchronous evaluation may have named another since the snapshot): the victims are renamed to
 * `<dir>.deleting` here (no longer checkpoints for anyone listing them) and deleted by the writer
 * once the save is over (hand_deletions), so that deleting large files does not stall training. A
 * crash in between leaves `.deleting` directories behind, never a damaged checkpoint. */
static ct_status rotate_after_commit(ct_trainer *t, ct_async_saver *sv, const snapshot *job) {
    char **victims;
    int n;
    ct_status s = ct_checkpoint_rotation_victims(t, &victims, &n);
    for (int i = 0; s == CT_OK && i < n; i++) {
        char aside[4300];
        snprintf(aside, sizeof aside, "%s.deleting", victims[i]);
        if (remove_tree(aside) != CT_OK || rename(victims[i], aside) != 0) {
            s = remove_tree(victims[i]); /* deleted here then */
            victims[i][0] = '\0';
            continue;
        }
        char *moved = strdup(aside);
        if (!moved) {
            s = ct_error(CT_ERR_NOMEM, "out of memory");
            break;
        }
        free(victims[i]);
        victims[i] = moved;
    }
    if (s != CT_OK) {
        for (int i = 0; i < n; i++) (void)remove_tree(victims[i]); /* "" or a name renamed aside */
        ct_checkpoint_list_free(victims, n);
        return ct_error_prefix(s, "asynchronous save of %s: rotating checkpoints: ", job->dir);
    }
    sv->doomed_next = victims;
    sv->n_doomed_next = n;
    return CT_OK;
}

/* Hands rotation's victims to the writer (which is idle: the save is over). */
static void hand_deletions(ct_async_saver *sv) {
    if (!sv->doomed_next) return;
    pthread_mutex_lock(&sv->mu);
    CT_ASSERT(!sv->doomed); /* the last deletions were done before the save that rotated */
    sv->doomed = sv->doomed_next;
    sv->n_doomed = sv->n_doomed_next;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    sv->doomed_next = NULL;
    sv->n_doomed_next = 0;
}

/* One round of the protocol for the save in flight: its local progress, then (several processes)
 * one all-reduce of {not finished here, failed here}, MAX over the processes. block: first wait
 * until this process's share of the current phase is done. Every process makes the same rounds, as
 * the phases change on the all-reduced values only. */
static ct_status advance_once(ct_trainer *t, bool block);

/* advance_once, its time on the training thread counted for the save's debug line */
static ct_status advance(ct_trainer *t, bool block) {
    ct_async_saver *sv = t->saver;
    if (!sv || sv->phase == PHASE_IDLE) return CT_OK;
    sv->round_start = ct_trainer_now();
    ct_status s = advance_once(t, block);
    if (sv->phase != PHASE_IDLE) sv->finishing_ms += (ct_trainer_now() - sv->round_start) * 1e3;
    return s;
}

static ct_status advance_once(ct_trainer *t, bool block) {
    ct_async_saver *sv = t->saver;
    snapshot *job = sv->job;
    int64_t v[2] = {0, 0}; /* {not finished here, failed here} */
    ct_status mine = CT_OK;
    char msg[MSG_CAP] = "";
    bool committed = false; /* the commit succeeded (read under the lock) */
    pthread_mutex_lock(&sv->mu);
    if (sv->phase == PHASE_PARTS) {
        while (block && !sv->part_done) pthread_cond_wait(&sv->cv, &sv->mu);
        v[0] = !sv->part_done;
        if (sv->part_done && sv->part_status != CT_OK) {
            mine = sv->part_status;
            memcpy(msg, sv->part_msg, sizeof msg);
        }
    } else if (job->shared) {
        /* the commit: rank 0's writer (with one process, right after its part) */
        bool part_failed = sv->part_done && sv->part_status != CT_OK;
        while (block && !sv->commit_done && !part_failed) {
            pthread_cond_wait(&sv->cv, &sv->mu);
            part_failed = sv->part_done && sv->part_status != CT_OK;
        }
        v[0] = !sv->commit_done && !part_failed;
        if (part_failed) {
            mine = sv->part_status;
            memcpy(msg, sv->part_msg, sizeof msg);
        } else if (sv->commit_done && sv->commit_status != CT_OK) {
            mine = sv->commit_status;
            memcpy(msg, sv->commit_msg, sizeof msg);
        }
        committed = sv->commit_done && sv->commit_status == CT_OK;
    }
    pthread_mutex_unlock(&sv->mu);
    if (sv->phase == PHASE_COMMIT && job->shared && !v[0] && mine == CT_OK) {
        mine = rotate_after_commit(t, sv, job);
        if (mine != CT_OK) snprintf(msg, sizeof msg, "%s", ct_last_error());
    }
    /* 1: the save failed (nothing committed); 2: committed, but the rotation after it failed */
    v[1] = mine == CT_OK ? 0 : committed ? 2 : 1;
    if (t->world_size > 1) {
        ct_status r = ct_comm_all_reduce_i64(t->comm, v, 2, CT_MAX);
        if (r != CT_OK) {
            char why[MSG_CAP];
            snprintf(why, sizeof why, "%s", ct_last_error());
            finish_job(sv, false);
            return ct_error(r, "asynchronous save of %s: %s", job->dir, why);
        }
    }
    if (v[1]) {
        int phase = sv->phase;
        bool rotation = v[1] == 2;
        finish_job(sv, rotation);
        ct_status e;
        if (mine != CT_OK)
            e = ct_error(mine, "%s", msg);
        else if (phase == PHASE_PARTS)
            e = ct_error(CT_ERR_IO, "asynchronous save of %s: another process failed while writing its part; "
                                    "nothing was committed", job->dir);
        else
            e = ct_error(CT_ERR_IO, "asynchronous save of %s: process 0 failed to %s (see its message)", job->dir,
                         rotation ? "rotate checkpoints after committing it" : "commit it");
        if (rotation) return e; /* the checkpoint is whole: not a failed save */
        /* Every writer of this save is idle once every process has passed finish_job: only then may
         * rank 0 delete the temporary directory (a barrier, as every process is in this branch). */
        if (t->world_size > 1) {
            char why[MSG_CAP];
            snprintf(why, sizeof why, "%s", ct_last_error());
            ct_status b = ct_comm_barrier(t->comm);
            if (b != CT_OK) return ct_error_prefix(b, "after the failed save of %s (%s): ", job->dir, why);
            ct_error(e, "%s", why);
        }
        return ct_checkpoint_save_failed(t, job->step, job->dir, job->tmp, job->prev_best, mine != CT_OK, e);
    }
    if (v[0]) return CT_OK; /* still in flight somewhere */
    if (sv->phase == PHASE_PARTS) {
        /* every part is written: rank 0's writer seals and renames */
        sv->phase = PHASE_COMMIT;
        if (job->shared) {
            pthread_mutex_lock(&sv->mu);
            sv->work = WORK_COMMIT;
            pthread_cond_broadcast(&sv->cv);
            pthread_mutex_unlock(&sv->mu);
        }
        return CT_OK;
    }
    finish_job(sv, true);
    return CT_OK;
}

ct_status ct_trainer_async_save_poll(ct_trainer *t) { return advance(t, false); }

ct_status ct_trainer_async_save_drain(ct_trainer *t) {
    while (t->saver && t->saver->phase != PHASE_IDLE) CT_TRY(advance(t, true));
    return CT_OK;
}

/* Every process's part of job on disk: rank 0 can tell without asking (each progress file appears
 * whole, through a rename). */
static bool all_parts_on_disk(const ct_trainer *t, const snapshot *job) {
    if (t->args.save_only_model) return true;
    for (int r = 0; r < t->world_size; r++) {
        char path[4400];
        struct stat st;
        snprintf(path, sizeof path, "%s/rng_state_%d.json", job->tmp, r);
        if (stat(path, &st) != 0) return false;
    }
    return true;
}

/* No collective: this process's writer finishes; rank 0 completes a save whose every part is on
 * disk. What cannot be completed stays an uncommitted temporary directory, with a warning. */
static void drain_local(ct_trainer *t) {
    ct_async_saver *sv = t->saver;
    if (!sv || sv->phase == PHASE_IDLE) return;
    sv->round_start = ct_trainer_now();
    wait_writer_idle(sv);
    snapshot *job = sv->job;
    bool committed = false; /* as far as this process knows */
    if (job->shared) {
        ct_status s;
        if (sv->part_status != CT_OK)
            s = ct_error(sv->part_status, "%s", sv->part_msg);
        else if (sv->commit_done)
            s = sv->commit_status == CT_OK ? CT_OK : ct_error(sv->commit_status, "%s", sv->commit_msg);
        else if (!all_parts_on_disk(t, job))
            s = ct_error(CT_ERR_STATE, "not every process's part is on disk");
        else
            s = commit(job);
        if (s == CT_OK) s = ct_trainer_rotate_checkpoints(t);
        if (s != CT_OK) ct_log_warning("the checkpoint %s was not completed: %s", job->dir, ct_last_error());
        committed = s == CT_OK;
    }
    finish_job(sv, committed);
}

ct_status ct_trainer_async_save_end_train(ct_trainer *t, ct_status s) {
    if (!t->saver) return s;
    char first[MSG_CAP];
    snprintf(first, sizeof first, "%s", ct_last_error());
    ct_status d = CT_OK;
    if (s == CT_OK || s == CT_ERR_INTERRUPTED || t->world_size == 1)
        d = ct_trainer_async_save_drain(t);
    else
        drain_local(t);
    ct_trainer_async_save_free(t);
    if (s == CT_OK) return d;
    if (d != CT_OK) ct_log_error("%s", ct_last_error());
    return ct_error(s, "%s", first);
}

void ct_trainer_async_save_free(ct_trainer *t) {
    ct_async_saver *sv = t->saver;
    if (!sv) return;
    drain_local(t);
    pthread_mutex_lock(&sv->mu);
    sv->quit = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (sv->started) pthread_join(sv->thread, NULL);
    snapshot_free(sv->spare);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    t->saver = NULL;
}

/* --- the save ----------------------------------------------------------------------------------- */

ct_status ct_checkpoint_save(ct_trainer *t, const char *dir, const char *tmp, const char *prev_best) {
    double t0 = ct_trainer_now();
    bool async = t->args.save_async;
    snapshot *s;
    ct_async_saver *sv = NULL;
    if (async) CT_TRY(saver_get(t, &sv));
    CT_ASSERT(!sv || sv->phase == PHASE_IDLE); /* ct_trainer_save_checkpoint drained the previous save */
    snapshot *spare = sv ? sv->spare : NULL;
    if (sv) sv->spare = NULL;
    bool comm_failed = false, own = false;
    int64_t step = t->state.global_step;
    ct_status st = take_snapshot(t, dir, tmp, async, spare, &s, &comm_failed, &own);
    snapshot_free(spare);
    if (st != CT_OK) return comm_failed ? st : ct_checkpoint_save_failed(t, step, dir, tmp, prev_best, own, st);
    snprintf(s->prev_best, sizeof s->prev_best, "%s", prev_best);
    if (async) {
        hand_over(t, sv, s);
        double ms = (ct_trainer_now() - t0) * 1e3;
        ct_log_debug("%s: snapshot taken and handed to the writer in %.2f ms [training thread: %.3f ms]", dir, ms, ms);
        return CT_OK;
    }
    /* Synchronous: the same writers, right away; the commit only once every process wrote its part. */
    st = write_part(s);
    own = st != CT_OK;
    if (t->world_size > 1) st = agree(t, st, dir, "writing its part", &comm_failed);
    bool written = st == CT_OK; /* on every process alike */
    if (written && s->shared) {
        st = commit(s);
        own = st != CT_OK;
    }
    /* rank 0's commit: its failure is every process's */
    if (t->world_size > 1 && written) st = agree(t, st, dir, "committing it", &comm_failed);
    bool shared = s->shared;
    snapshot_free(s);
    if (st != CT_OK) return comm_failed ? st : ct_checkpoint_save_failed(t, step, dir, tmp, prev_best, own, st);
    /* Committed: a failed rotation is not a failed save (the new checkpoint is whole). */
    st = shared ? ct_trainer_rotate_checkpoints(t) : CT_OK;
    if (t->world_size > 1) st = agree(t, st, dir, "rotating checkpoints", NULL);
    double ms = (ct_trainer_now() - t0) * 1e3;
    ct_log_debug("%s: written synchronously in %.2f ms [training thread: %.3f ms]", dir, ms, ms);
    return st;
}
