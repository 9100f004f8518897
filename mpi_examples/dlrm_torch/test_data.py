"""The Python port of the planted-teacher generator (data.py) against the C++
example's own output, in one process:

- the training stream as Criteo TSV (`--write-tsv`): byte for byte the same file
  for several seeds, table counts, sizes, Zipf exponents (1.0 takes the
  exponential branch) and noise levels;
- the held-out stream: the teacher's AUC ceiling and the positive rate that the
  C++ example prints after a 0-step run (bags of 1 and 3 ids).

Usage: test_data.py PATH_TO_CXX_DLRM
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402

cxx = sys.argv[1]
failures = []

TSV_CONFIGS = [
    ["--tables", "8", "--table-sizes", "50:2000", "--seed", "1"],
    ["--tables", "26", "--seed", "7", "--zipf", "1.0"],
    ["--tables", "30", "--table-sizes", "2:5000000", "--seed", "123456789", "--zipf", "2.5", "--noise", "1.5"],
    ["--tables", "3", "--table-sizes", "10,20,30", "--seed", "0", "--zipf", "0.5"],
]

with tempfile.TemporaryDirectory(prefix="dlrm_torch_data_") as tmp:
    for i, cfg in enumerate(TSV_CONFIGS):
        c_path, p_path = os.path.join(tmp, f"c{i}.tsv"), os.path.join(tmp, f"p{i}.tsv")
        subprocess.run([cxx] + cfg + ["--write-tsv", c_path, "--tsv-rows", "1500"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, os.path.join(HERE, "dlrm.py")] + cfg +
                       ["--write-tsv", p_path, "--tsv-rows", "1500"], check=True, stdout=subprocess.DEVNULL)
        with open(c_path, "rb") as f:
            c_bytes = f.read()
        with open(p_path, "rb") as f:
            p_bytes = f.read()
        lines = c_bytes.count(b"\n")
        if lines != 1500:
            failures.append(f"C++ TSV {cfg}: {lines} lines, expected 1500")
        if c_bytes != p_bytes:
            c_lines, p_lines = c_bytes.split(b"\n"), p_bytes.split(b"\n")
            first = next((k for k, (x, y) in enumerate(zip(c_lines, p_lines)) if x != y), min(len(c_lines), len(p_lines)))
            theirs = c_lines[first][:80] if first < len(c_lines) else b""
            ours = p_lines[first][:80] if first < len(p_lines) else b""
            failures.append(f"TSV {cfg}: differs from line {first + 1}: C++ {theirs!r} Python {ours!r}")
        else:
            print(f"TSV identical ({len(c_bytes)} bytes): {' '.join(cfg)}")

for bag, seed, sizes in ((1, 3, "50:2000"), (3, 5, "50:2000"), (2, 9, "300:1000000")):
    tables = 8
    out = subprocess.run([cxx, "--tables", str(tables), "--table-sizes", sizes, "--dim", "8", "--bottom-mlp", "8-8",
                          "--top-mlp", "8-1", "--batch", "64", "--eval-samples", "6000", "--steps", "0", "--dense",
                          "--bag", str(bag), "--seed", str(seed)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"positives ([0-9.]+), teacher's AUC ceiling ([0-9.]+)", out)
    if m is None:
        failures.append(f"no teacher's AUC ceiling in the C++ output:\n{out}")
        continue
    src = data.SyntheticSource(seed, data.parse_table_sizes(sizes, tables), bag=bag)
    ev = src.eval(0, 6000)
    ceiling, positives = f"{data.auc(ev.teacher, ev.labels):.5f}", f"{ev.labels.mean():.3f}"
    if (positives, ceiling) != (m.group(1), m.group(2)):
        failures.append(f"held-out stream (bag {bag}, seed {seed}): C++ positives {m.group(1)} ceiling {m.group(2)}, "
                        f"Python {positives} {ceiling}")
    else:
        print(f"held-out stream identical in positives {positives} and teacher's AUC ceiling {ceiling} "
              f"(bag {bag}, seed {seed}, sizes {sizes})")

if failures:
    print("FAILED:\n" + "\n".join(failures))
    sys.exit(1)
print("data: the Python generator reproduces the C++ example's samples")
