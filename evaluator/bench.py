"""Time one kernel source against cuBLAS in several dtypes and print a table.

    python -m evaluator.bench --path trsm_small --dtype float64 complex128 [--source FILE]
    python -m evaluator.bench --path trsm_blocked --bucket m2049_16384 --dtype float64

Each row is graph-replayed device µs per call (median ± IQR), candidate and cuBLAS interleaved in
one process, the speedup's 95 % interval, the noise floor (the candidate against a second graph
of itself), the verdict against cuBLAS and the plausibility floor (evaluator/noise.py), plus
single-call latency; the seed kernel is used when no source is given.

Bad arguments (unknown path, shape bucket of the path or dtype, a source file that is missing,
not UTF-8 or too large, a device index out of range, a --json folder that does not exist) are
one line on stderr and exit 2 before anything runs; exit 1 when a kernel fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from seeds.canonical import canonical_source
from seeds.registry import UnknownBucketError, UnknownPathError, get_path

# A kernel source is tens of kilobytes (the evolver caps candidates at 60 000 characters); a
# megabyte is the wrong file.
MAX_SOURCE_BYTES = 1 << 20


def format_rows(label: str, report: EvaluationReport) -> list[str]:
    """Markdown table rows, one per timed shape of ``report``."""
    if not report.passed:
        return [
            f"| {label} | {report.dtype} | FAILED: {report.failure and report.failure.describe()} |"
        ]
    return [
        f"| {label} | {report.dtype} | {'×'.join(str(v) for v in t.problem)} "
        f"| {t.baseline_us:.2f} ± {t.baseline_spread_us:.2f} "
        f"| {t.candidate_us:.2f} ± {t.candidate_spread_us:.2f} | {t.speedup:.2f}× "
        f"| {t.speedup_low:.2f}–{t.speedup_high:.2f} | {100 * t.noise_floor:.1f} % "
        f"| {t.verdict()} | {t.plausibility_floor_us:.2f} "
        f"| {t.baseline_single_call_us:.1f} | {t.candidate_single_call_us:.1f} |"
        for t in report.timings
    ]


HEADER = (
    "| kernel | dtype | shape (the op's parameters) | baseline µs (IQR) | kernel µs (IQR) "
    "| speedup | 95 % interval | noise floor | verdict | plausibility floor µs "
    "| baseline 1-call µs | kernel 1-call µs |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) instead of the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def _cut(text: str) -> str:
    return text if len(text) <= 60 else f"{text[:30]}…({len(text)} characters)"


def _path_id(text: str) -> str:
    try:
        get_path(text)
    except UnknownPathError as error:
        message = str(error).replace(repr(text), repr(_cut(text)))
        raise argparse.ArgumentTypeError(message) from None
    return text


def _source_file(text: str) -> Path:
    """A readable UTF-8 file of at most ``MAX_SOURCE_BYTES``."""
    path = Path(text)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_SOURCE_BYTES + 1)
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"cannot read {_cut(text)}: {error.strerror or error}"
        ) from None
    if len(raw) > MAX_SOURCE_BYTES:
        raise argparse.ArgumentTypeError(f"{_cut(text)} is larger than {MAX_SOURCE_BYTES} bytes")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise argparse.ArgumentTypeError(
            f"{_cut(text)} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset "
            f"{error.start})"
        ) from None
    return path


def _device_index(text: str) -> int:
    if not text.isdigit() or len(text) > 4 or int(text) > 1023:
        raise argparse.ArgumentTypeError(f"expected a device index 0..1023, not {_cut(text)!r}")
    return int(text)


def _json_file(text: str) -> Path:
    """An output file whose folder exists, checked before the run so no result is lost."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {_cut(str(path.parent))} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{_cut(text)} is a folder")
    return path


def _label(text: str) -> str:
    if not text.strip() or len(text) > 256 or "\n" in text:
        raise argparse.ArgumentTypeError("expected a label on one line of 1..256 characters")
    return text


def main(argv: list[str] | None = None) -> int:
    """Time the kernel in each dtype and print the table; the exit status (0 all ok, 1 a kernel
    failed, 2 a usage error)."""
    parser = _Parser(prog="python -m evaluator.bench", description=__doc__)
    parser.add_argument("--path", type=_path_id, default="trsm_small")
    parser.add_argument("--bucket", help="the path's shape bucket (default: its first)")
    parser.add_argument("--dtype", nargs="+", help="default: every dtype of the path")
    parser.add_argument("--source", type=_source_file, help="kernel source (default: the seed)")
    parser.add_argument("--label", type=_label, default=None)
    parser.add_argument("--gpu", type=_device_index, default=0)
    parser.add_argument("--json", type=_json_file, help="also write the full reports here")
    args = parser.parse_args(argv)
    try:
        spec = get_path(args.path, args.bucket)
    except UnknownBucketError:
        parser.error(
            f"argument --bucket: unknown shape bucket {_cut(args.bucket)!r} of path {args.path}; "
            f"its buckets: {', '.join(get_path(args.path).bucket_names)}"
        )
    args.dtype = args.dtype or list(spec.dtypes)
    unknown = [d for d in args.dtype if d not in spec.dtypes]
    if unknown:
        parser.error(
            f"argument --dtype: unknown dtype {_cut(unknown[0])!r} for {spec.path_id}; "
            f"known: {' '.join(spec.dtypes)}"
        )
    # --source is where a kernel's text enters here: canonical, as the evolver's intake makes it.
    source = canonical_source(args.source.read_text()) if args.source else spec.seed_source()
    label = args.label or (args.source.name if args.source else "seed")
    print(HEADER)
    reports = []
    for dtype in args.dtype:
        evaluator = Evaluator(args.path, dtype, args.gpu, bucket=args.bucket)
        try:
            report = evaluator.evaluate(source)
        finally:
            evaluator.close()
        reports.append(report.to_dict())
        print("\n".join(format_rows(label, report)), flush=True)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    return 0 if all(r["status"] == "ok" for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
