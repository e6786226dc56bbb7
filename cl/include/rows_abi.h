/* The row ops' host/kernel contract, valid C and OpenCL C (lib/ops/rows.c, cl/include/rows.h):
 * the chunk length of the long-row path, in elements per work-item (a program built with
 * -DOCLML_LONG_ITEMS takes that instead: 16-bit rows, whose plan says so). */
#ifndef OCLML_ROWS_ABI_H
#define OCLML_ROWS_ABI_H
#ifndef OCLML_LONG_ITEMS
#define OCLML_LONG_ITEMS 16
#endif
#endif
