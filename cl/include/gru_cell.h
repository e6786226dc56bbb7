/* The GRU cell (RSSM.md) once for every kernel that applies it: the fused and tiled steps and the
 * RSSM rollout. */
#ifndef OCLML_GRU_CELL_H
#define OCLML_GRU_CELL_H
#include "common.h"

/* h' of one unit from its gate pre-activations, biases included: ar and az with both sides
 * summed, the n gate's input side an_x and hidden side an_h apart. TORCH scales the hidden side
 * by r; CHO (cho true) passes W_hn (r * h) + b_hn as an_h, already scaled. */
inline float gru_cell(float ar, float az, float an_x, float an_h, float h, bool cho) {
    const float r = oclml_sigmoid(ar), z = oclml_sigmoid(az);
    const float n = tanh(an_x + (cho ? an_h : r * an_h));
    return (1.0f - z) * n + z * h;
}

#endif
