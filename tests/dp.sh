#!/bin/sh
# liboclml-mpi under mpirun with two ranks on the test device (PoCL in CI): the library's own
# cases (tests/dp_test.c), then the training examples at two ranks against one process on the
# same global batch: the loss curves must agree within 1e-3 relative, and the examples check
# that every rank holds the same weights after each step (the MLP and GPT with dropout; the
# variant sweeps add the CNN and GPT without dropout). Every run has a time limit, so a hang
# fails the test instead of the suite.
set -u
builddir=${OCLML_TEST_BUILDDIR:-.}
mpiexec=${OCLML_MPIEXEC:-mpirun}
command -v "$mpiexec" >/dev/null 2>&1 || { echo "no $mpiexec"; exit 77; }
flags=""
if "$mpiexec" --version 2>/dev/null | grep -q "Open MPI"; then
    # Two ranks on any machine (slots are cores), quietly; as root Open MPI wants consent.
    flags="--oversubscribe --mca btl_base_warn_component_unused 0"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
fi
run2() { timeout 900 "$mpiexec" -np 2 $flags "$@"; }
rc=0

echo "== dp_test: 2 ranks"
run2 "$builddir/tests/dp_test" || rc=1

# Loss curves: "step N  loss X" lines of one process and of two.
curve() { grep -E '^step +[0-9]+ +loss' | awk '{print $4}'; }
compare() { # name, file of one process, file of two
    paste "$2" "$3" | awk -v name="$1" '
        { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1 + 1e-12); if (r > worst) worst = r; n++ }
        END { printf "%s: %d steps, worst relative difference %.2e\n", name, n, worst;
              exit (n < 2 || worst > 1e-3) }'
}
tmp=${OCLML_TEST_TMP:-/tmp}/dp.$$
mkdir -p "$tmp"
example() { # the example and its arguments: one process, then two ranks, curves compared
    name=$1; shift
    echo "== $name: one process, then two ranks"
    timeout 900 "$builddir/examples/$name" "$@" > "$tmp/one" 2>&1 || { cat "$tmp/one"; rc=1; return; }
    run2 "$builddir/examples/$name" "$@" > "$tmp/two" 2>&1 || { cat "$tmp/two"; rc=1; return; }
    curve < "$tmp/one" > "$tmp/one.curve"
    curve < "$tmp/two" > "$tmp/two.curve"
    compare "$name" "$tmp/one.curve" "$tmp/two.curve" || { cat "$tmp/one" "$tmp/two"; rc=1; }
}
example train_mlp --steps 50 --batch 64
example train_gpt --steps 6 --batch 4 --seq 16 --fixed --dropout 0.1
if [ -n "${OCLML_TEST_SWEEP:-}" ]; then
    example train_cnn --steps 50 --images 32
    example train_gpt --steps 8 --batch 4 --seq 16 --fixed
    # A vocabulary small enough that the table's gradient is exchanged whole (no gather).
    example train_gpt --steps 6 --batch 4 --seq 16 --fixed --vocab 16
fi
rm -rf "$tmp"
exit $rc
