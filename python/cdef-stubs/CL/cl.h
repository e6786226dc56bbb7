/* The OpenCL handles oclml.h names, as opaque pointers for cffi. */
typedef struct _cl_context *cl_context;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef int cl_int;
typedef unsigned int cl_uint;
