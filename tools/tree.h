/* Tools and benches run from the build tree use the tree's kernels, so that a developer needs no
 * OCLML_KERNEL_PATH; installed copies (not under the build directory) use the install's. */
#ifndef OCLML_TOOLS_TREE_H
#define OCLML_TOOLS_TREE_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The source tree's kernel directory when this executable lies in the build tree and
 * $OCLML_KERNEL_PATH is unset, else NULL (for oclml_ctx_config.kernel_path). */
static inline const char *oclml_tree_kernel_path(void) {
#if defined(OCLML_TREE_BUILDDIR) && defined(OCLML_TREE_KERNELS)
    if (getenv("OCLML_KERNEL_PATH")) return NULL;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    size_t b = strlen(OCLML_TREE_BUILDDIR);
    if (strncmp(exe, OCLML_TREE_BUILDDIR, b) == 0 && exe[b] == '/') return OCLML_TREE_KERNELS;
#endif
    return NULL;
}

#endif
