# OCLML_CHECK_CFLAGS(VAR, FLAGS): append to VAR each flag of FLAGS that the C compiler accepts.
AC_DEFUN([OCLML_CHECK_CFLAGS], [
  for oclml_flag in $2; do
    AC_MSG_CHECKING([whether $CC accepts $oclml_flag])
    oclml_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -Werror $oclml_flag"
    oclml_save_LDFLAGS=$LDFLAGS
    LDFLAGS="$LDFLAGS $oclml_flag"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])],
      [AC_MSG_RESULT([yes]); $1="${$1} $oclml_flag"], [AC_MSG_RESULT([no])])
    CFLAGS=$oclml_save_CFLAGS
    LDFLAGS=$oclml_save_LDFLAGS
  done
])
