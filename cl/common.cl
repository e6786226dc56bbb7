/* Shared helpers, prepended to every liboclml program.
 * The build defines OCLML_MAX_WG (the device's work-group size limit) and OCLML_IS_GPU. */

/* Kernels address tensors as (buffer, element offset): a wrapped cl_mem may start anywhere. */
#define OCLML_AT(buf, off) ((buf) + (off))
