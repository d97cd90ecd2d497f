/* Many steps of a quadratic problem in one call: the stochastic gradient, an update of
 * kernels.c (descend, momentum_descend, correct, edm: api.c's order) and the circulant
 * mix, step after step, with the state held in cache between steps.
 *
 * decentopt_quadratic_steps_<t>_<isa> runs `steps` iterations of
 *
 *     g = H x - b + F z_s,   (y0, y1, ...) = update(x, ..., g, alpha_s, beta),   x+ = W y0
 *
 * for every agent and run of a stacked quadratic. The state is laid out coordinate-major,
 * (d, n * runs) (decentopt/comm/mixers/native.py transposes it in and out once per call),
 * so that every loop runs over the n * runs columns: the products of the small per-agent
 * matrices vectorise across agents instead of along a row of ten numbers. H is given as
 * (d, d, n * runs), F as (d, k, n * runs), b as (d, n * runs) and the noise z, drawn in
 * float32 by the caller for all steps at once, as (steps, k, n * runs).
 *
 * Compiled once per instruction set like kernels.c (build.py); single-threaded: the
 * states it serves are too small for threads to pay.
 */
#include <stdint.h>
#include <stdlib.h>

#ifndef DECENTOPT_ISA
#define DECENTOPT_ISA generic
#endif

enum { DESCEND = 0, MOMENTUM_DESCEND = 1, CORRECT = 2, EDM = 3 };
#define MAX_TERMS 64
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
