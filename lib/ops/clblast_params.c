/* CLBlast's kernel parameters from the tuning table (keys clblast.xgemm, clblast.xgemm_direct,
 * clblast.gemm_switch; written by oclml-tune, shipped in tuning/DEVICE.jsonl).
 *
 * CLBlastOverrideParameters is process-wide: it sets the parameters CLBlast uses on a device for
 * every context in the process. So they are applied at context creation, once per (process,
 * device) and again only when a context asks for different ones, holding the process-wide
 * CLBlast lock (no GEMM runs meanwhile). When two contexts on one device ask for different
 * values, the one created later wins, for every context on that device from then on
 * (oclml_ctx_clblast_tuning reports it); a context that asks for none (all 0) leaves what is in
 * force. A set that breaks CLBlast's rules or the device's limits is refused: from the tuning
 * option or $OCLML_TUNE with a context-creation error, from a file with a warning (the file may
 * come from another version), CLBlast's own values then staying. */
#include "ops/clblast_params.h"
#include "ops/gemm.h"

#include <stdio.h>
#include <string.h>

/* CLBlast's header declares CLBlastClearCache() without a prototype: not our warning to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop

/* The three groups of parameters: tuning key, CLBlast kernel name, parameter names. */
enum { XGEMM, DIRECT, SWITCH, N_GROUPS };
static const struct group {
    oclml__tune_key key;
    const char *kernel, *label;
    int n;
    const char *const *names;
} GROUPS[N_GROUPS] = {
    {OCLML__TUNE_CLBLAST_XGEMM, "Xgemm", "Xgemm", OCLML_CLBLAST_XGEMM_N, oclml_clblast_xgemm_names},
    {OCLML__TUNE_CLBLAST_XGEMM_DIRECT, "XgemmDirect", "XgemmDirect", OCLML_CLBLAST_DIRECT_N,
     oclml_clblast_direct_names},
    {OCLML__TUNE_CLBLAST_GEMM_SWITCH, "GemmRoutine", "the direct/indirect switch", 1,
     &oclml_clblast_switch_name}};

/* What is in force per device (all 0: CLBlast's own); guarded by the CLBlast lock. */
#define MAX_DEVICES 64
static struct applied {
    cl_device_id device;
    long v[N_GROUPS][OCLML_CLBLAST_XGEMM_N];
} applied[MAX_DEVICES];
static unsigned n_applied;

/* The context's requested values of group g. */
static oclml__tune_value *requested(const oclml_ctx *ctx, int g) {
    return &ctx->tune[GROUPS[g].key];
}

static void format_values(const long *v, int n, char *out, size_t len) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%ld", i ? ":" : "", v[i]);
}

/* Whether group g's values are valid on this device; why receives the broken rule. */
static bool group_ok(const oclml_ctx *ctx, int g, const long *v, char *why, size_t len) {
    oclml_clblast_limits lim = {ctx->caps.max_work_group_size,
                                {ctx->caps.max_work_group_size, ctx->caps.max_work_group_size},
                                ctx->caps.local_mem_bytes};
    if (g == XGEMM) return oclml_clblast_xgemm_ok(v, &lim, why, len);
    if (g == DIRECT) return oclml_clblast_direct_ok(v, &lim, why, len);
    if (v[0] < 1) snprintf(why, len, "the switch size must be at least 1");
    return v[0] >= 1;
}

static struct applied *find_applied(cl_device_id device, bool add) {
    for (unsigned i = 0; i < n_applied; i++)
        if (applied[i].device == device) return &applied[i];
    if (!add || n_applied == MAX_DEVICES) return NULL;
    applied[n_applied].device = device;
    return &applied[n_applied++];
}

oclml_status oclml__ops_context_init(oclml_ctx *ctx) {
    long want[N_GROUPS][OCLML_CLBLAST_XGEMM_N] = {{0}};
    bool any = false;
    for (int g = 0; g < N_GROUPS; g++) {
        oclml__tune_value *t = requested(ctx, g);
        if (!t || oclml_clblast_unset(t->v, GROUPS[g].n)) continue;
        char why[160], values[256];
        if (!group_ok(ctx, g, t->v, why, sizeof why)) {
            format_values(t->v, GROUPS[g].n, values, sizeof values);
            if (t->source == OCLML__TUNE_OPTION || t->source == OCLML__TUNE_ENV)
                return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                                   "%s: %s=%s cannot be CLBlast's %s parameters on this device: "
                                   "%s (%s)",
                                   oclml__tune_source_name(t->source),
                                   oclml__tunables[GROUPS[g].key].key, values, GROUPS[g].label, why,
                                   oclml__tunables[GROUPS[g].key].help);
            oclml__log(ctx, OCLML_LOG_WARN,
                       "%s=%s from the %s ignored, CLBlast's own %s parameters stay: %s",
                       oclml__tunables[GROUPS[g].key].key, values,
                       oclml__tune_source_name(t->source), GROUPS[g].label, why);
            memset(t->v, 0, sizeof t->v);
            t->source = OCLML__TUNE_DEFAULT;
            continue;
        }
        memcpy(want[g], t->v, (size_t)GROUPS[g].n * sizeof(long));
        any = true;
    }
    if (!any) return OCLML_SUCCESS;

    oclml_status st = OCLML_SUCCESS;
    oclml__clblast_lock();
    struct applied *a = find_applied(ctx->device, true);
    if (!a)
        st = oclml__fail(ctx, OCLML_ERR_CLBLAST,
                         "tuned CLBlast parameters: more than %d devices in one process",
                         MAX_DEVICES);
    for (int g = 0; g < N_GROUPS && !st; g++) {
        if (oclml_clblast_unset(want[g], GROUPS[g].n) || !memcmp(a->v[g], want[g], sizeof want[g]))
            continue;
        size_t values[OCLML_CLBLAST_XGEMM_N];
        for (int i = 0; i < GROUPS[g].n; i++) values[i] = (size_t)want[g][i];
        CLBlastStatusCode s =
            CLBlastOverrideParameters(ctx->device, GROUPS[g].kernel, CLBlastPrecisionSingle,
                                      (size_t)GROUPS[g].n, (const char **)GROUPS[g].names, values);
        if (s != CLBlastSuccess) {
            char text[256];
            format_values(want[g], GROUPS[g].n, text, sizeof text);
            st = oclml__fail_text(
                ctx, OCLML_ERR_CLBLAST, (int)s,
                oclml__asprintf("tuned CLBlast parameters %s=%s: CLBlastOverrideParameters(%s) "
                                "failed with CLBlast status %d",
                                oclml__tunables[GROUPS[g].key].key, text, GROUPS[g].kernel,
                                (int)s));
            break;
        }
        memcpy(a->v[g], want[g], sizeof want[g]);
        oclml__log(ctx, OCLML_LOG_INFO, "CLBlast %s parameters set for %s", GROUPS[g].kernel,
                   ctx->info.device_name);
    }
    oclml__clblast_unlock();
    return st;
}

bool oclml__clblast_gemmk1(cl_device_id device) {
    const struct applied *a = find_applied(device, false);
    return a && !oclml_clblast_unset(a->v[XGEMM], OCLML_CLBLAST_XGEMM_N) && a->v[XGEMM][0] == 1;
}

oclml_status oclml_ctx_clblast_tuning(const oclml_ctx *ctx, int *active, char *text, size_t len) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (text && len) text[0] = '\0';
    long in_force[N_GROUPS][OCLML_CLBLAST_XGEMM_N] = {{0}};
    oclml__clblast_lock();
    struct applied *a = find_applied(ctx->device, false);
    if (a) memcpy(in_force, a->v, sizeof in_force);
    oclml__clblast_unlock();
    int any = 0;
    size_t used = 0;
    for (int g = 0; g < N_GROUPS; g++) {
        const oclml__tune_value *t = requested(ctx, g);
        bool set = !oclml_clblast_unset(in_force[g], GROUPS[g].n);
        bool mine = t && set && !memcmp(t->v, in_force[g], (size_t)GROUPS[g].n * sizeof(long));
        char values[256];
        format_values(in_force[g], GROUPS[g].n, values, sizeof values);
        any |= set;
        if (!text || used >= len) continue;
        const char *sep = g ? "; " : "";
        if (!set)
            used += (size_t)snprintf(text + used, len - used, "%s%s CLBlast's own", sep,
                                     GROUPS[g].kernel);
        else if (mine)
            used += (size_t)snprintf(text + used, len - used, "%s%s tuned from the %s: %s", sep,
                                     GROUPS[g].kernel, oclml__tune_source_name(t->source), values);
        else
            used += (size_t)snprintf(text + used, len - used,
                                     "%s%s tuned by another context in this process: %s", sep,
                                     GROUPS[g].kernel, values);
    }
    if (active) *active = any;
    return OCLML_SUCCESS;
}
