/* Empty: cffi knows size_t. (python/gen_cdef.sh preprocesses oclml.h against these stubs.) */
