/* The save of a snapshot, synchronous or through the asynchronous writer (see checkpoint_async.h);
 * both write the same image (checkpoint_impl.h, checkpoint/image.c).
 *
 * The writer thread touches only its image and the parameter store's metadata (names, shapes,
 * offsets: fixed once the model is built); everything it reads was copied on the training thread
 * before the hand-over, under the saver's mutex, and the training thread reuses those copies only
 * after the writer said it is done, under the same mutex. Signals are blocked in the writer, so
 * SIGINT/SIGTERM reach the training thread (and no write of the writer is interrupted). */
#define _GNU_SOURCE /* gettid */
#include "checkpoint/checkpoint_async.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_impl.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/util.h"

#define MSG_CAP 2048
#define WRITER_NICE 10

/* --- the saver: one writer thread per snapshot owner (*snap->saver) ----------------------------- */

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
    ct_checkpoint_image *job;
    char **doomed; /* directories rotation renamed aside, for the writer to delete (before any work) */
    int n_doomed;
    bool part_done, commit_done;
    ct_status part_status, commit_status;
    char part_msg[MSG_CAP], commit_msg[MSG_CAP];
    /* the training thread's */
    int phase;
    ct_checkpoint_image *spare;      /* the last save's image, whose memory the next one reuses */
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
                if (ct_remove_tree(doomed[i]) != CT_OK) ct_log_warning("rotation: %s", ct_last_error());
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
        ct_checkpoint_image *job = sv->job;
        bool commit_too = sv->commit_too;
        pthread_mutex_unlock(&sv->mu);
        ct_status ps = CT_OK, cs = CT_OK;
        char pmsg[MSG_CAP] = "", cmsg[MSG_CAP] = "";
        bool committed = false;
        if (work == WORK_PART) {
            ps = ct_checkpoint_image_write(job);
            if (ps != CT_OK) snprintf(pmsg, sizeof pmsg, "asynchronous save of %s: %s", job->dir, ct_last_error());
        }
        if (ps == CT_OK && (work == WORK_COMMIT || commit_too)) {
            cs = ct_checkpoint_image_commit(job);
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

static ct_status saver_get(ct_checkpoint_snapshot *snap, ct_async_saver **out) {
    if (*snap->saver) {
        *out = *snap->saver;
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
    *snap->saver = sv;
    *out = sv;
    return CT_OK;
}

static void hand_over(ct_checkpoint_snapshot *snap, ct_async_saver *sv, ct_checkpoint_image *s) {
    pthread_mutex_lock(&sv->mu);
    /* the writer may still be deleting what the last rotation dropped: it starts on this save then */
    sv->job = s;
    sv->part_done = sv->commit_done = false;
    sv->part_status = sv->commit_status = CT_OK;
    sv->part_msg[0] = sv->commit_msg[0] = '\0';
    sv->commit_too = snap->world_size == 1;
    sv->work = WORK_PART;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    sv->phase = snap->world_size == 1 ? PHASE_COMMIT : PHASE_PARTS;
}

/* Waits until the writer has nothing in hand (no collective). */
static void wait_writer_idle(ct_async_saver *sv) {
    pthread_mutex_lock(&sv->mu);
    while (sv->busy || sv->work != WORK_NONE || sv->doomed) pthread_cond_wait(&sv->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
}

static void hand_deletions(ct_async_saver *sv);

/* The save in flight is over (committed, or failed): its image becomes the spare. */
static void finish_job(ct_async_saver *sv, bool committed) {
    wait_writer_idle(sv);
    sv->finishing_ms += (ct_monotonic_seconds() - sv->round_start) * 1e3;
    if (sv->job)
        ct_log_debug("%s: %s; after the hand-over the training thread spent %.2f ms on it (polls, waits, "
                     "agreement, rotation) [training thread: %.3f ms]",
                     sv->job->dir, committed ? "committed" : "not committed", sv->finishing_ms, sv->finishing_ms);
    sv->finishing_ms = 0;
    ct_checkpoint_image_free(sv->spare);
    sv->spare = sv->job;
    sv->job = NULL;
    sv->phase = PHASE_IDLE;
    hand_deletions(sv);
}

/* Rotation after a commit, decided on the training thread with the best checkpoint known now (an
 * asynchronous evaluation may have named another since the snapshot): the victims are renamed to
 * `<dir>.deleting` here (no longer checkpoints for anyone listing them) and deleted by the writer
 * once the save is over (hand_deletions), so that deleting large files does not stall training. A
 * crash in between leaves `.deleting` directories behind, never a damaged checkpoint; the run that
 * next locks output_dir deletes them. */
static ct_status rotate_after_commit(ct_checkpoint_snapshot *snap, ct_async_saver *sv,
                                     const ct_checkpoint_image *job) {
    char **aside;
    int n;
    ct_status s = ct_checkpoint_rotate_aside(snap, &aside, &n);
    if (s != CT_OK) return ct_error_prefix(s, "asynchronous save of %s: rotating checkpoints: ", job->dir);
    sv->doomed_next = n ? aside : NULL;
    sv->n_doomed_next = n;
    if (!n) free(aside);
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
static ct_status advance_once(ct_checkpoint_snapshot *snap, bool block);

/* advance_once, its time on the training thread counted for the save's debug line */
static ct_status advance(ct_checkpoint_snapshot *snap, bool block) {
    ct_async_saver *sv = *snap->saver;
    if (!sv || sv->phase == PHASE_IDLE) return CT_OK;
    sv->round_start = ct_monotonic_seconds();
    ct_status s = advance_once(snap, block);
    if (sv->phase != PHASE_IDLE) sv->finishing_ms += (ct_monotonic_seconds() - sv->round_start) * 1e3;
    return s;
}

static ct_status advance_once(ct_checkpoint_snapshot *snap, bool block) {
    ct_async_saver *sv = *snap->saver;
    ct_checkpoint_image *job = sv->job;
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
        mine = rotate_after_commit(snap, sv, job);
        if (mine != CT_OK) snprintf(msg, sizeof msg, "%s", ct_last_error());
    }
    /* 1: the save failed (nothing committed); 2: committed, but the rotation after it failed */
    v[1] = mine == CT_OK ? 0 : committed ? 2 : 1;
    if (snap->world_size > 1) {
        ct_comm_set_label(snap->comm, "save_async agreement (%s)", job->dir);
        ct_status r = ct_comm_all_reduce_i64(snap->comm, v, 2, CT_MAX);
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
        if (snap->world_size > 1) {
            char why[MSG_CAP];
            snprintf(why, sizeof why, "%s", ct_last_error());
            ct_comm_set_label(snap->comm, "barrier after the failed save of %s", job->dir);
            ct_status b = ct_comm_barrier(snap->comm);
            if (b != CT_OK) return ct_error_prefix(b, "after the failed save of %s (%s): ", job->dir, why);
            ct_error(e, "%s", why);
        }
        return ct_checkpoint_save_failed(snap, job->step, job->dir, job->tmp, job->prev_best, mine != CT_OK, e);
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

ct_status ct_checkpoint_async_poll(ct_checkpoint_snapshot *snap) { return advance(snap, false); }

ct_status ct_checkpoint_async_drain(ct_checkpoint_snapshot *snap) {
    while (*snap->saver && (*snap->saver)->phase != PHASE_IDLE) CT_TRY(advance(snap, true));
    return CT_OK;
}

/* Every process's part of job on disk: rank 0 can tell without asking (each progress file appears
 * whole, through a rename). */
static bool all_parts_on_disk(const ct_checkpoint_snapshot *snap, const ct_checkpoint_image *job) {
    if (snap->args->save_only_model) return true;
    for (int r = 0; r < snap->world_size; r++) {
        char path[4400];
        struct stat st;
        snprintf(path, sizeof path, "%s/rng_state_%d.json", job->tmp, r);
        if (stat(path, &st) != 0) return false;
    }
    return true;
}

/* No collective: this process's writer finishes; rank 0 completes a save whose every part is on
 * disk. What cannot be completed stays an uncommitted temporary directory, with a warning. */
static void drain_local(ct_checkpoint_snapshot *snap) {
    ct_async_saver *sv = *snap->saver;
    if (!sv || sv->phase == PHASE_IDLE) return;
    sv->round_start = ct_monotonic_seconds();
    wait_writer_idle(sv);
    ct_checkpoint_image *job = sv->job;
    bool committed = false; /* as far as this process knows */
    if (job->shared) {
        ct_status s;
        if (sv->part_status != CT_OK)
            s = ct_error(sv->part_status, "%s", sv->part_msg);
        else if (sv->commit_done)
            s = sv->commit_status == CT_OK ? CT_OK : ct_error(sv->commit_status, "%s", sv->commit_msg);
        else if (!all_parts_on_disk(snap, job))
            s = ct_error(CT_ERR_STATE, "not every process's part is on disk");
        else
            s = ct_checkpoint_image_commit(job);
        if (s == CT_OK) s = ct_checkpoint_rotate(snap);
        if (s != CT_OK) ct_log_warning("the checkpoint %s was not completed: %s", job->dir, ct_last_error());
        committed = s == CT_OK;
    }
    finish_job(sv, committed);
}

ct_status ct_checkpoint_async_end_train(ct_checkpoint_snapshot *snap, ct_status s) {
    if (!*snap->saver) return s;
    char first[MSG_CAP];
    snprintf(first, sizeof first, "%s", ct_last_error());
    ct_status d = CT_OK;
    if (s == CT_OK || s == CT_ERR_INTERRUPTED || snap->world_size == 1)
        d = ct_checkpoint_async_drain(snap);
    else
        drain_local(snap);
    ct_checkpoint_async_free(snap);
    if (s == CT_OK) return d;
    if (d != CT_OK) ct_log_error("%s", ct_last_error());
    return ct_error(s, "%s", first);
}

void ct_checkpoint_async_free(ct_checkpoint_snapshot *snap) {
    ct_async_saver *sv = *snap->saver;
    if (!sv) return;
    drain_local(snap);
    pthread_mutex_lock(&sv->mu);
    sv->quit = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    if (sv->started) pthread_join(sv->thread, NULL);
    ct_checkpoint_image_free(sv->spare);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    *snap->saver = NULL;
}

/* --- the save ----------------------------------------------------------------------------------- */

ct_status ct_checkpoint_save(ct_checkpoint_snapshot *snap, const char *dir, const char *tmp,
                             const char *prev_best) {
    double t0 = ct_monotonic_seconds();
    bool async = snap->args->save_async;
    ct_checkpoint_image *s;
    ct_async_saver *sv = NULL;
    if (async) CT_TRY(saver_get(snap, &sv));
    CT_ASSERT(!sv || sv->phase == PHASE_IDLE); /* ct_checkpoint_save_step drained the previous save */
    ct_checkpoint_image *spare = sv ? sv->spare : NULL;
    if (sv) sv->spare = NULL;
    bool comm_failed = false, own = false;
    int64_t step = snap->state->global_step;
    ct_status st = ct_checkpoint_image_take(snap, dir, tmp, async, spare, &s, &comm_failed, &own);
    ct_checkpoint_image_free(spare);
    if (st != CT_OK) return comm_failed ? st : ct_checkpoint_save_failed(snap, step, dir, tmp, prev_best, own, st);
    snprintf(s->prev_best, sizeof s->prev_best, "%s", prev_best);
    if (async) {
        hand_over(snap, sv, s);
        double ms = (ct_monotonic_seconds() - t0) * 1e3;
        ct_log_debug("%s: snapshot taken and handed to the writer in %.2f ms [training thread: %.3f ms]", dir, ms, ms);
        return CT_OK;
    }
    /* Synchronous: the same writers, right away; the commit only once every process wrote its part. */
    st = ct_checkpoint_image_write(s);
    own = st != CT_OK;
    if (snap->world_size > 1) st = ct_checkpoint_agree(snap, st, dir, "writing its part", &comm_failed);
    bool written = st == CT_OK; /* on every process alike */
    if (written && s->shared) {
        st = ct_checkpoint_image_commit(s);
        own = st != CT_OK;
    }
    /* rank 0's commit: its failure is every process's */
    if (snap->world_size > 1 && written) st = ct_checkpoint_agree(snap, st, dir, "committing it", &comm_failed);
    bool shared = s->shared;
    ct_checkpoint_image_free(s);
    if (st != CT_OK) return comm_failed ? st : ct_checkpoint_save_failed(snap, step, dir, tmp, prev_best, own, st);
    /* Committed: a failed rotation is not a failed save (the new checkpoint is whole). */
    st = shared ? ct_checkpoint_rotate(snap) : CT_OK;
    if (snap->world_size > 1) st = ct_checkpoint_agree(snap, st, dir, "rotating checkpoints", NULL);
    double ms = (ct_monotonic_seconds() - t0) * 1e3;
    ct_log_debug("%s: written synchronously in %.2f ms [training thread: %.3f ms]", dir, ms, ms);
    return st;
}
