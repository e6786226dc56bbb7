/* A separate process for the disk-cache tests: builds one kernel file with a fresh context and
 * prints what the cache did, as "key=value" words on one line. For memory.cl it builds the fill
 * op's program (through prewarm) and runs the op from it, so that the entry the tests damage is
 * the one the op loads.
 * usage: cache_client DIR FILE [OPTIONS [MAX_BYTES]]   (DIR "-" means the environment's choice) */
#include <oclml.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    /* A call that blocks (a regression such as reading a FIFO in the cache) ends the client, so
     * that the suite fails instead of hanging. */
    alarm(600);
    oclml_ctx_config o;
    oclml_ctx_config_init(&o);
    o.cache_dir = strcmp(argv[1], "-") ? argv[1] : NULL;
    o.tuning = "cache.binaries=1"; /* on every driver, PoCL included */
    if (argc > 4) o.cache_max_bytes = strtoull(argv[4], NULL, 10);
    char err[4096];
    oclml_ctx *ctx;
    if (oclml_ctx_create(&ctx, &o, err, sizeof err)) {
        printf("status=create_failed\n");
        return 1;
    }
    double ms = 0;
    bool fill = !strcmp(argv[2], "memory.cl");
    oclml_status st =
        fill ? oclml_ctx_prewarm(ctx, "fill", 1, NULL, NULL)
             : oclml_ctx_build_file(ctx, argv[2], argc > 3 && *argv[3] ? argv[3] : NULL, &ms);
    /* The program must also run: fill through it when it is memory.cl. */
    if (!st && fill) {
        size_t n = 3;
        float out[3] = {0};
        oclml_tensor *t;
        st = oclml_tensor_create(ctx, 1, &n, &t);
        if (!st) st = oclml_fill(ctx, t, 7.0f);
        if (!st) st = oclml_tensor_read(t, out, 3);
        if (!st && (out[0] != 7.0f || out[2] != 7.0f)) st = OCLML_ERR_INVALID_ARGUMENT;
        oclml_tensor_destroy(t);
    }
    oclml_cache_info c;
    oclml_ctx_cache_info(ctx, &c);
    printf("status=%d enabled=%d builds=%lu hits=%lu misses=%lu evictions=%lu entries=%zu "
           "bytes=%llu ms=%.3f reason=%s\n",
           (int)st, c.enabled, c.builds, c.disk_hits, c.disk_misses, c.disk_evictions, c.entries,
           (unsigned long long)c.bytes, ms, c.disabled_reason[0] ? c.disabled_reason : "-");
    oclml_ctx_destroy(ctx);
    return st ? 1 : 0;
}
