/* What a training example's model needs to train in one process of several (data
 * parallelism, examples/train_dp.h): which part of the global batch is its own, and two calls
 * into the gradient exchange: one after each layer's backward (its gradients are enqueued), one
 * before the optimizer step (wait for the average; an error skips the step). The models know
 * nothing of MPI. */
#ifndef OCLML_TRAIN_PARALLEL_H
#define OCLML_TRAIN_PARALLEL_H

#include <oclml.h>
#include <stddef.h>

typedef struct train_parallel {
    /* This process trains on rows [part * B / parts, (part + 1) * B / parts) of the global
     * batch B (B divisible by parts). parts 0 or 1: the whole batch. */
    size_t part, parts;
    oclml_status (*grads_ready)(void *user, size_t first, size_t count); /* may be NULL */
    oclml_status (*before_step)(void *user);                             /* may be NULL */
    void *user;
    /* May be NULL. Every process's x into all, in process order (all holds *parts of x); x
     * NULL: only *parts. *parts 0: nothing to gather (one process), x is the only one. A model
     * that has it may exchange, between the exchange and the step, what makes a gradient
     * rather than the gradient (gpt_model.c: the token embedding's lookup). A process without
     * room for all passes all NULL: it fails, and so do the others, rather than waiting. */
    oclml_status (*gather)(void *user, const oclml_tensor *x, oclml_tensor *all, size_t *parts);
} train_parallel;

/* The local share of a global batch of B rows, and the first of them. */
static inline size_t train_local_rows(const train_parallel *p, size_t B) {
    return p && p->parts > 1 ? B / p->parts : B;
}
static inline size_t train_first_row(const train_parallel *p, size_t B) {
    return p && p->parts > 1 ? p->part * (B / p->parts) : 0;
}

static inline oclml_status train_grads_ready(const train_parallel *p, size_t first, size_t count) {
    return p && p->grads_ready ? p->grads_ready(p->user, first, count) : OCLML_SUCCESS;
}
static inline oclml_status train_before_step(const train_parallel *p) {
    return p && p->before_step ? p->before_step(p->user) : OCLML_SUCCESS;
}

#endif
