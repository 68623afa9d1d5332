/* The blocking-job pool: a few threads for work that must not run on a
 * worker's loop. Results come back to the worker that asked through its
 * post queue, so done() runs on that worker's thread. */
#include <pthread.h>
#include <stdlib.h>

#include "app.h"
#include "worker.h"

typedef struct job {
    struct job *next;
    flare_task_fn work, done;
    void *ud;
    flare_worker_t *w;
    flare_post_node_t reply; /* embedded: sending the result back cannot fail */
} job_t;

struct flare_job_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_t *head, *tail;
    bool stop;
    unsigned nthreads;
    pthread_t threads[];
};

static void job_done(void *ud)
{
    job_t *j = ud;
    if (j->done != NULL)
        j->done(j->ud);
    free(j);
}

static void *job_main(void *arg)
{
    flare_job_pool_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->head == NULL && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->head == NULL && p->stop)
            break;
        job_t *j = p->head;
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->work(j->ud);
        j->reply.fn = job_done;
        j->reply.ud = j;
        j->reply.heap = false;
        flare__loop_post_node(&j->w->loop, &j->reply);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int flare__jobs_start(flare_app_t *app)
{
    unsigned n = app->cfg.job_threads;
    flare_job_pool_t *p = calloc(1, sizeof(*p) + n * sizeof(pthread_t));
    if (p == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "job pool: out of memory");
    int e = pthread_mutex_init(&p->mu, NULL);
    if (e != 0) {
        free(p);
        return flare__fail(FLARE_ESYS, e, "pthread_mutex_init (job pool)");
    }
    e = pthread_cond_init(&p->cv, NULL);
    if (e != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return flare__fail(FLARE_ESYS, e, "pthread_cond_init (job pool)");
    }
    app->jobs = p;
    for (unsigned i = 0; i < n; i++) {
        e = pthread_create(&p->threads[i], NULL, job_main, p);
        if (e != 0) {
            /* all or nothing: a pool smaller than configured is a surprise
             * found under load, not at start */
            flare__jobs_stop(app);
            return flare__fail(FLARE_ETHREAD, e, "pthread_create (job thread %u of %u)", i, n);
        }
        p->nthreads++;
    }
    return 0;
}

/* Runs the jobs still queued, then joins the threads. Called after the
 * workers have stopped: their done() callbacks are posted to loops that no
 * longer run, and flare__loop_dispose runs them. */
void flare__jobs_stop(flare_app_t *app)
{
    flare_job_pool_t *p = app->jobs;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    app->jobs = NULL;
}

size_t flare__jobs_queued(flare_app_t *app)
{
    flare_job_pool_t *p = app->jobs;
    size_t n = 0;
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (job_t *j = p->head; j != NULL; j = j->next)
        n++;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int flare_worker_job(flare_worker_t *w, flare_task_fn work, flare_task_fn done, void *ud)
{
    if (w == NULL || work == NULL)
        return FLARE_EINVAL;
    flare_job_pool_t *p = w->app->jobs;
    if (p == NULL)
        return FLARE_ESTATE;
    job_t *j = malloc(sizeof(*j));
    if (j == NULL)
        return FLARE_ENOMEM;
    *j = (job_t){ .work = work, .done = done, .ud = ud, .w = w };
    pthread_mutex_lock(&p->mu);
    if (p->tail != NULL)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}
