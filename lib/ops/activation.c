/* The fused activations (oclml_activation) as the kernels' programs name them: the build
 * define that picks activation.h's act_apply and act_backward, a name for messages and
 * variants, and the argument check every op that takes one runs first. */
#include "ops/ops.h"

static const char *const NAMES[] = {"none", "relu", "gelu_erf", "gelu_tanh",
                                    "silu", "tanh", "sigmoid"};
static const char *const DEFINES[] = {
    NULL,           "-DACT_RELU=1", "-DACT_GELU_ERF=1", "-DACT_GELU_TANH=1",
    "-DACT_SILU=1", "-DACT_TANH=1", "-DACT_SIGMOID=1"};
_Static_assert(sizeof NAMES / sizeof NAMES[0] == OCLML__N_ACTS &&
                   sizeof DEFINES / sizeof DEFINES[0] == OCLML__N_ACTS,
               "one name and one define for each oclml_activation");

oclml_status oclml__check_act(oclml_ctx *ctx, oclml_activation act) {
    if ((unsigned)act >= OCLML__N_ACTS)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "activation %d is not an oclml_activation (OCLML_ACT_NONE to "
                           "OCLML_ACT_SIGMOID)",
                           (int)act);
    return OCLML_SUCCESS;
}

const char *oclml__act_define(oclml_activation act) {
    return (unsigned)act < OCLML__N_ACTS ? DEFINES[act] : NULL;
}

const char *oclml__act_name(oclml_activation act) {
    return (unsigned)act < OCLML__N_ACTS ? NAMES[act] : "?";
}
