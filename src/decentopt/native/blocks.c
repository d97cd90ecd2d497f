/* Many steps of a quadratic problem in one call: the stochastic gradient, an update of
 * kernels.c (descend, momentum_descend, correct, edm: api.c's order) and the circulant
 * mix, step after step, with the state held in cache between steps.
 *
 * decentopt_quadratic_steps_<t>_<isa> runs `steps` iterations of
 *
 *     g = H x - b + F z_s,   (y0, y1, ...) = update(x, ..., g, alpha_s, beta),   x+ = W y0
 *
 * for every agent and run of a stacked quadratic. Runs never mix with each other, so the
 * runs go in panels of a few, and a panel takes every step of the block before the next
 * starts: its Hessians, noise factors and state stay in the second-level cache (measured
 * on Figure 1's sizes: all runs a step at a time streamed 1.3 MB a step from the third
 * level). A panel is laid out (d, n * runs), coordinate-major, so that every loop runs
 * across agents and runs; decentopt/comm/mixers/native.py lays the state and the
 * quadratic's terms out so.
 *
 * Compiled once per instruction set like kernels.c (build.py); single-threaded: the
 * states it serves are too small for threads to pay.
 */
#include <stdint.h>
#include <stdlib.h>

/* Multiply-adds fused where the CPU has them: the gradient's products are summed in
   another order than torch's anyway, and the update's rounding is checked to a tolerance. */
#pragma GCC optimize("fp-contract=fast")

#ifndef DECENTOPT_ISA
#define DECENTOPT_ISA generic
#endif

enum { DESCEND = 0, MOMENTUM_DESCEND = 1, CORRECT = 2, EDM = 3 };
#define MAX_TERMS 64
#ifndef CHUNK
#define CHUNK 16 /* columns of the gradient's sums held in registers */
#endif
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define EXPORT(name) CAT(CAT(name, SUFFIX), DECENTOPT_ISA)

#define T float
#define SUFFIX f32
#include "blocks.h"
#undef T
#undef SUFFIX

#define T double
#define SUFFIX f64
#include "blocks.h"
