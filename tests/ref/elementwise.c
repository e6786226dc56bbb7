/* Elementwise references in double precision. */
#include <math.h>
#include <oclml.h>

#include "ref/ref.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static const double GELU_K = 0.79788456080286536, GELU_C = 0.044715;

double ref_unary(int op, double p, double x) {
    switch ((oclml_unary_op)op) {
    case OCLML_NEG:
        return -x;
    case OCLML_ABS:
        return fabs(x);
    case OCLML_EXP:
        return exp(x);
    case OCLML_LOG:
        return log(x);
    case OCLML_SQRT:
        return sqrt(x);
    case OCLML_RSQRT:
        return 1.0 / sqrt(x);
    case OCLML_RECIP:
        return 1.0 / x;
    case OCLML_RELU:
        return isnan(x) ? x : x > 0 ? x : 0.0;
    case OCLML_SIGMOID:
        return sigmoid(x);
    case OCLML_TANH:
        return tanh(x);
    case OCLML_GELU_ERF:
        return 0.5 * x * erfc(-x / sqrt(2.0));
    case OCLML_GELU_TANH:
        return x * sigmoid(2 * GELU_K * (x + GELU_C * x * x * x));
    case OCLML_SILU:
        return x * sigmoid(x);
    case OCLML_POW:
        return pow(x, p);
    }
    return NAN;
}

double ref_unary_grad(int op, double p, double x) {
    switch ((oclml_unary_op)op) {
    case OCLML_NEG:
        return -1;
    case OCLML_ABS:
        return x > 0 ? 1 : x < 0 ? -1 : 0;
    case OCLML_EXP:
        return exp(x);
    case OCLML_LOG:
        return 1.0 / x;
    case OCLML_SQRT:
        return 0.5 / sqrt(x);
    case OCLML_RSQRT:
        return -0.5 / (x * sqrt(x));
    case OCLML_RECIP:
        return -1.0 / (x * x);
    case OCLML_RELU:
        return isnan(x) ? x : x > 0 ? 1 : 0;
    case OCLML_SIGMOID:
        return sigmoid(x) * (1 - sigmoid(x));
    case OCLML_TANH:
        return 1 - tanh(x) * tanh(x);
    case OCLML_GELU_ERF:
        return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case OCLML_GELU_TANH: {
        double t = tanh(GELU_K * (x + GELU_C * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
    }
    case OCLML_SILU:
        return sigmoid(x) * (1 + x * (1 - sigmoid(x)));
    case OCLML_POW:
        return p * pow(x, p - 1);
    }
    return NAN;
}

double ref_unary_grad_scale(int op, double p, double x) {
    switch ((oclml_unary_op)op) {
    case OCLML_GELU_ERF:
        return 0.5 * erfc(-x / sqrt(2.0)) + fabs(x) * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case OCLML_GELU_TANH: {
        double t = tanh(GELU_K * (x + GELU_C * x * x * x));
        return 0.5 * (1 + t) + 0.5 * fabs(x) * (1 - t * t) * GELU_K * (1 + 3 * GELU_C * x * x);
    }
    case OCLML_SILU:
        return sigmoid(x) * (1 + fabs(x) * (1 - sigmoid(x)));
    default:
        return fabs(ref_unary_grad(op, p, x));
    }
}

double ref_binary(int op, double a, double b) {
    switch ((oclml_binary_op)op) {
    case OCLML_ADD:
        return a + b;
    case OCLML_SUB:
        return a - b;
    case OCLML_MUL:
        return a * b;
    case OCLML_DIV:
        return a / b;
    case OCLML_MAX:
        return (isnan(a) || isnan(b)) ? NAN : fmax(a, b);
    case OCLML_MIN:
        return (isnan(a) || isnan(b)) ? NAN : fmin(a, b);
    }
    return NAN;
}
