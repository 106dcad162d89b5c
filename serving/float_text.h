/* Internal to psgraph: a float as printf's "%.9g" writes it (the 9 significant digits a
 * float needs to read back as itself), without printf: a served answer's numbers
 * (serving/rest.c). */
#ifndef PSGRAPH_SERVING_FLOAT_TEXT_H
#define PSGRAPH_SERVING_FLOAT_TEXT_H

/* Room for any "%.9g" of a float, with its NUL. */
#define PSG_FLOAT_TEXT_MAX 24

/* Writes finite x into out (PSG_FLOAT_TEXT_MAX bytes) exactly as
 * snprintf(out, n, "%.9g", (double)x) would, and returns the length; 0 (nothing written)
 * for a value the exact integer arithmetic here does not reach (magnitudes beyond about
 * 1e-20 to 1e20, and non-finite values): the caller prints those with printf. */
int psg_float_text_g9(float x, char *out);

#endif
