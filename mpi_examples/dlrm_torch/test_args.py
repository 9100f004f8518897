"""dlrm.py's argument errors: each bad command line ends with exit status 2 and
a message that names the problem (checked before torch is imported, so this
runs in one process without mpirun; the rank count comes from Open MPI's
variables, set here as mpirun would set them)."""
import os
import subprocess
import sys
import tempfile

DLRM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlrm.py")
missing_dir = os.path.join(tempfile.gettempdir(), "dlrm_torch_no_such_dir_%d" % os.getpid(), "x.tsv")

CASES = [
    (["--dim", "16", "--bottom-mlp", "64-8"], "the bottom MLP's last size (8) must equal --dim (16)"),
    (["--top-mlp", "64-2"], "the top MLP's last size must be 1"),
    (["--bottom-mlp", "64-x"], "argument --bottom-mlp: expected sizes like 512-256-64, got '64-x'"),
    (["--mp-density", "0"], "argument --mp-density: expected a number in (0, 1], got '0'"),
    (["--dp-density", "1.5"], "argument --dp-density: expected a number in (0, 1], got '1.5'"),
    (["--dp-density", "nan"], "argument --dp-density: expected a number in (0, 1], got 'nan'"),
    (["--steps", "-1"], "argument --steps: expected a number in [0, 1000000000], got '-1'"),
    (["--table-sizes", "1:10"], "--table-sizes MIN:MAX needs 2 <= MIN <= MAX <= 2e9, got '1:10'"),
    (["--tables", "3", "--table-sizes", "10,20"], "--table-sizes lists 2 sizes for 3 tables"),
    (["--compare", "--dense"], "--compare runs the exact baseline itself: drop --dense"),
    (["--max-auc-diff", "0.1"], "check --compare's two runs: add --compare"),
    (["--check-single", "--steps", "10", "--parity-steps", "20"], "--parity-steps 20 is more than --steps 10"),
    (["--inject-reference-offset", "0.001"], "--inject-reference-offset perturbs --check-single's reference"),
    (["--hot-rows", "20", "--emb-update", "per-sample"], "--hot-rows needs --emb-update merged"),
    (["--hot-min-count", "0"], "argument --hot-min-count: expected a number in [1, 1000000000], got '0'"),
    (["--emb-update", "sum"], "argument --emb-update: invalid choice: 'sum'"),
    (["--inject-hot-bug"], "--inject-hot-bug perturbs the hot rows' update: add --hot-rows"),
    (["--compare", "--check-single", "--hot-rows", "20"], "--check-single checks the exact run, which --compare "
     "keeps without hot rows"),
    (["--optimizer", "adam"], "argument --optimizer: invalid choice: 'adam'"),
    (["--rows-codec", "fp4"], "argument --rows-codec: invalid choice: 'fp4'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--batch", "250"], "--batch 250 is not divisible by the 4 ranks"),
    (["--eval-samples", "3"], "--eval-samples 3: need at least one held-out sample per rank (4)"),
    (["--write-tsv", "x.tsv", "--bag", "2"], "--write-tsv needs --bag 1"),
    (["--write-tsv", missing_dir, "--tsv-rows", "3"], "No such file or directory"),
]

env = dict(os.environ, OMPI_COMM_WORLD_SIZE="4", OMPI_COMM_WORLD_RANK="0")
failures = []
for argv, needle in CASES:
    r = subprocess.run([sys.executable, DLRM] + argv, env=env, capture_output=True, text=True)
    if r.returncode != 2 or needle not in r.stderr:
        failures.append(f"{argv}: exit {r.returncode}, stderr {r.stderr.strip()!r}; expected 2 and {needle!r}")
# Only rank 0 prints: the other ranks of the same bad command line exit quietly.
r = subprocess.run([sys.executable, DLRM, "--batch", "250"], env=dict(env, OMPI_COMM_WORLD_RANK="1"),
                   capture_output=True, text=True)
if r.returncode != 2 or r.stderr:
    failures.append(f"rank 1: exit {r.returncode}, stderr {r.stderr!r}; expected 2 and nothing")
r = subprocess.run([sys.executable, DLRM, "--help"], capture_output=True, text=True)
for flag in ("--compare", "--check-single", "--dp-density", "--mp-density", "--dp-exact-steps", "--rows-codec", "--progress",
             "--write-tsv", "--emb-update", "--hot-rows", "--hot-min-count", "--hot-sample", "--inject-routing-bug",
             "--inject-hot-bug", "--inject-reference-offset"):
    if r.returncode != 0 or flag not in r.stdout:
        failures.append(f"--help: exit {r.returncode}, {flag} not listed")
if failures:
    print("FAILED:\n" + "\n".join(failures))
    sys.exit(1)
print(f"arguments: {len(CASES)} bad command lines rejected with their messages")
