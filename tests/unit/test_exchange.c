/* http/exchange.c's observers: installation order, each event calling the
 * hooks it has and no other, the limits, removal keeping the order, and the
 * table going away with the last observer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http/exchange.h"
#include "worker.h"

static char trace[256];

static void note(void *ud, const char *ev)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%s:%s ", (const char *)ud, ev);
    strncat(trace, buf, sizeof(trace) - strlen(trace) - 1);
}

static void on_start(void *ud, struct flare_req *ex)
{
    (void)ex;
    note(ud, "start");
}

static void on_answered(void *ud, struct flare_req *ex, int status, uint64_t bytes)
{
    (void)ex;
    char ev[24];
    snprintf(ev, sizeof(ev), "answered%d/%u", status, (unsigned)bytes);
    note(ud, ev);
}

static void on_stream(void *ud, struct flare_req *ex)
{
    (void)ex;
    note(ud, "stream");
}

static void on_done(void *ud, struct flare_req *ex)
{
    (void)ex;
    note(ud, "done");
}

static const flare_ex_observer_t logger = { .start = on_start, .answered = on_answered };
static const flare_ex_observer_t counter = { .stream = on_stream, .done = on_done };
static const flare_ex_observer_t all = { on_start, on_answered, on_stream, on_done };
static const flare_ex_observer_t extra[3] = { { .done = on_done },
                                              { .done = on_done },
                                              { .done = on_done } };

static void test_events_reach_their_hooks_in_order(void **state)
{
    (void)state;
    flare_worker_t w;
    memset(&w, 0, sizeof(w));
    struct flare_req ex;
    memset(&ex, 0, sizeof(ex));
    ex.worker = &w;

    /* no observer: flare__ex_long only marks the exchange */
    flare__ex_long(&ex);
    assert_true(ex.flags & EX_LONG);
    assert_null(w.ex_obs);

    assert_int_equal(flare__ex_observe(&w, &logger, "log"), 0);
    assert_int_equal(flare__ex_observe(&w, &counter, "met"), 0);
    assert_int_equal(flare__ex_observe(&w, &all, "all"), 0);
    assert_int_equal(flare__ex_observe(&w, &counter, "again"), FLARE_EEXIST);
    flare_ex_observers_t *t = w.ex_obs;
    assert_non_null(t);
    assert_int_equal(t->n, 3);
    assert_int_equal(t->nstart, 2);
    assert_int_equal(t->nanswered, 2);
    assert_int_equal(t->nstream, 2);
    assert_int_equal(t->ndone, 2);

    trace[0] = '\0';
    flare__ex_observe_answered(&ex, 200, 13);
    flare__ex_long(&ex);
    assert_string_equal(trace, "log:answered200/13 all:answered200/13 met:stream all:stream ");

    /* one more fits, the next does not */
    assert_int_equal(flare__ex_observe(&w, &extra[0], "x"), 0);
    assert_int_equal(flare__ex_observe(&w, &extra[1], "y"), FLARE_ETOOBIG);

    /* removing one keeps the others' order; an unknown one changes nothing */
    flare__ex_unobserve(&w, &logger);
    flare__ex_unobserve(&w, &extra[2]);
    assert_ptr_equal(w.ex_obs, t);
    assert_int_equal(t->n, 3);
    assert_int_equal(t->nstart, 1);
    assert_int_equal(t->nanswered, 1);
    assert_int_equal(t->ndone, 3);
    trace[0] = '\0';
    flare__ex_observe_answered(&ex, 404, 9);
    for (unsigned i = 0; i < t->ndone; i++)
        t->done[i].fn(t->done[i].ud, &ex);
    assert_string_equal(trace, "all:answered404/9 met:done all:done x:done ");

    /* the last one out frees the table: the plain path's test sees NULL */
    flare__ex_unobserve(&w, &counter);
    flare__ex_unobserve(&w, &all);
    flare__ex_unobserve(&w, &extra[0]);
    assert_null(w.ex_obs);
    flare__ex_unobserve(&w, &all); /* nothing installed: nothing happens */
    assert_null(w.ex_obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_reach_their_hooks_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
