"""No state that survives from one launch to the next: the candidate contract, checked on the
cubin NVRTC produced (an ELF image), before anything runs on the GPU.

Why: the timed graph replays reuse 8 input sets, and the integrity checks only look at X. A
kernel that keeps its last results in ``__device__`` globals, keyed on a few elements of A and
B, replays them instead of solving: on the H200 one scored 6.8x cuBLAS and passed the champion
checks with compute-sanitizer clean. The same storage lets blocks talk to each other (a
spin-wait chain on a ``__device__ volatile int flag``), which no check saw either. A TRSM needs
none of it: its inputs are its arguments, its scratch is registers, local and shared memory.

What NVRTC 13 emits for ``-arch=sm_90`` (``tests/test_evaluator_device_state.py`` compiles each
case), and so what this module reads:

* ``__device__`` variables, initialized or not, ``volatile`` or not, ``static`` inside a
  function, in an anonymous namespace, ``extern`` (whole-program mode defines it), and
  ``__managed__`` (the same, with ``STV_EXPORTED``): ``STT_OBJECT`` symbols in ``.nv.global``
  (``SHT_NOBITS``, zero-filled at module load) or ``.nv.global.init`` (``SHT_PROGBITS``), both
  ``SHF_ALLOC | SHF_WRITE``. A ``.global`` declared in inline PTX lands there as well
  (``$__name__N``). ``__device__ const`` tables and string literals (``$str``, printf's format)
  also go to ``.nv.global.init``: writable memory the kernel can reach through a cast, so they
  are refused too.
* ``__constant__`` data: ``.nv.constant3`` (``SHF_ALLOC``, not flagged writable, and a plain
  C++ store to it is dropped). But its generic address (``cvta.const`` in inline PTX) takes
  ordinary ``st``/``atom`` instructions, and the bank lives as long as the module: a
  ``__constant__`` counter or memo written that way passed this check in a red-team review
  (*The CUDA Handbook* §5.3: constant memory can be changed by writing to it from a kernel
  through its pointer). So every constant bank but the parameters' is refused. Kernel
  parameters: ``.nv.constant0.<kernel>``, written afresh by every launch; the addresses of
  globals the code uses: ``.nv.constant4`` (only with globals, refused anyway). A ``const``
  array local to the kernel is folded into the code (no section). Code: ``.text.<kernel>``
  (``SHF_EXECINSTR``).
* ``__shared__`` (static or ``extern``): ``.nv.shared.<kernel>`` and ``.nv.shared.reserved.N``,
  writable but per block, gone when the block ends. Local arrays live in the stack frame (no
  section); ``.nv.local.*`` would be per thread.
* Device-side ``malloc``/``new`` and ``free``/``delete``, ``printf`` and ``__assertfail``:
  undefined ``STT_FUNC`` symbols (``malloc``, ``free``, ``vprintf``, ``__assertfail``) the driver
  resolves to the device runtime at load; any other external function fails in ptxas
  ("Unresolved extern function"), since NVRTC compiles without ``-rdc``. The only undefined
  symbol of the seed is the weak ``.nv.reservedSmem.offset0``, a shared-memory offset.

The rules, an allow-list so that a section name NVRTC adds later is refused until looked at:

1. Every ``SHF_ALLOC`` section (what the driver loads onto the device) is code
   (``SHF_EXECINSTR``), a kernel's parameter bank (``.nv.constant0.*``) and then not writable,
   shared memory (``.nv.shared.*``) or local memory (``.nv.local.*``); any other (another
   constant bank included), and any ``.nv.global*`` section whatever its flags, is storage that
   outlives the launch.
2. No external symbol other than ``.nv.reservedSmem.*``. ``malloc``: the device heap outlives
   the launch, and with no symbol to hold a pointer it still carries state (a ``malloc`` after
   a ``free`` can hand the next launch the same block, its bytes unchanged).
   ``vprintf``: its buffer is host-side and the device cannot read it back, but a candidate
   has no reader for its output, printing from a timed kernel distorts the timing, and its
   format string is writable global data anyway. ``__assertfail``: the same strings. None is
   needed by a kernel that solves from its arguments.

Relocations need no pass of their own: each one names a symbol of the symbol table, and every
symbol is either undefined (rule 2) or defined in a section (rule 1). Memory reached through a
pointer derived from a kernel argument is B's or A's, checked by the integrity checks
(``evaluator.checks.integrity``), not here; an address made up out of nothing is a wild
pointer, which this check cannot see in the binary.

Each refusal is a :class:`CheckFailure` with check ``device_global_state``, naming the symbols
(their section and size) or, for storage without a symbol, the section.
"""

from __future__ import annotations

import io

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section, SymbolTableSection

from evaluator.report import CheckFailure

CHECK = "device_global_state"
# Section-name prefixes of allocated storage that does not outlive a launch (rule 1). The
# parameter bank must also be read-only: the prefix alone does not allow a writable one.
PARAMETER_PREFIX = ".nv.constant0."
PER_BLOCK_OR_THREAD_PREFIXES = (".nv.shared.", ".nv.local.")
GLOBAL_PREFIX = ".nv.global"
# External symbols a cubin may reference (rule 2): the driver's reserved shared-memory offsets.
ALLOWED_EXTERNAL_PREFIXES = (".nv.reservedSmem.",)
# Names listed in a failure's detail before "and N more" (the detail goes to the LLM).
MAX_NAMED = 8


def _refused_section(section: Section) -> bool:
    """True when ``section`` is device-global storage (rule 1 of the module docstring)."""
    name, flags = section.name, section["sh_flags"]
    if name.startswith(GLOBAL_PREFIX):
        return True
    if not flags & SH_FLAGS.SHF_ALLOC:
        return False  # not loaded onto the device: notes, .nv.info, symbol and string tables
    writable = bool(flags & SH_FLAGS.SHF_WRITE)
    if flags & SH_FLAGS.SHF_EXECINSTR or name.startswith(PARAMETER_PREFIX):
        return writable
    return not name.startswith(PER_BLOCK_OR_THREAD_PREFIXES)


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    more = len(items) - MAX_NAMED
    return f"{shown} and {more} more" if more > 0 else shown


def device_state_failure(cubin: bytes) -> CheckFailure | None:
    """The ``device_global_state`` failure of ``cubin`` (an ELF image from NVRTC), or None when
    it holds no storage that outlives a launch and calls no external function (rules in the
    module docstring).

    A cubin that is not a readable ELF image is refused too (the check fails closed): it came
    from our own NVRTC, so that is a compiler fault, but nothing unread may reach the GPU.
    """
    try:
        elf = ELFFile(io.BytesIO(cubin))
        sections = list(elf.iter_sections())
        refused = {i for i, section in enumerate(sections) if _refused_section(section)}
        storage: list[str] = []
        external: list[str] = []
        named_sections: set[int] = set()
        for table in sections:
            if not isinstance(table, SymbolTableSection):
                continue
            for symbol in table.iter_symbols():
                index, kind = symbol["st_shndx"], symbol["st_info"]["type"]
                if index == "SHN_UNDEF":
                    # Only a global or weak binding reaches outside the module; a local
                    # undefined symbol (the null entry, NVRTC's unnamed internal one) resolves
                    # to nothing.
                    if symbol["st_info"]["bind"] != "STB_LOCAL" and not symbol.name.startswith(
                        ALLOWED_EXTERNAL_PREFIXES
                    ):
                        external.append(symbol.name)
                elif isinstance(index, int) and index in refused and kind != "STT_SECTION":
                    named_sections.add(index)
                    section = sections[index].name
                    storage.append(f"{symbol.name} ({symbol['st_size']} B in {section})")
        storage += [
            f"{sections[i].name} ({sections[i]['sh_size']} B, no symbol)"
            for i in sorted(refused - named_sections)
        ]
    except Exception as exc:
        # pyelftools raises ELFError (ELFParseError) for most damage, but a truncated or
        # inconsistent table also surfaces as OverflowError, ValueError and the like; whatever
        # the parser trips on, the cubin was not read and must not run.
        return CheckFailure(CHECK, detail=f"the cubin is not a readable ELF image: {exc}"[:500])
    parts = []
    if storage:
        parts.append(
            "mutable device-global storage, which outlives the launch: "
            f"{_listed(storage)}. No __device__, __managed__ or __constant__ variable, string "
            "literal or __device__ const table (a __constant__ bank is writable through its "
            "generic address): a kernel keeps nothing from one launch to the next and blocks "
            "do not signal each other through global memory; read-only tables are const "
            "arrays local to the kernel, scratch in registers, local or __shared__ memory"
        )
    if external:
        parts.append(
            f"calls to the device runtime: {_listed(external)}. No malloc/new/free/delete "
            "(the device heap outlives the launch), printf or assert in a candidate"
        )
    return CheckFailure(CHECK, detail="; ".join(parts) + ".") if parts else None
