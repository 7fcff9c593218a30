"""The PDF page count, run as a child process with a deadline (:func:`core.files.prepare`
starts it): pypdf's recovery scan of a damaged or junk file can take tens of seconds of CPU,
which a worker thread could not be stopped in. Run by its path
(``python -I core/files/pdf_pages.py SECONDS``), so it imports pypdf and nothing of
SelfMind's: the PDF's bytes on stdin, one line of JSON on stdout, ``{"pages": N,
"encrypted": false}`` or ``{"error": "unreadable"}``.

Its own CPU time is capped too (``RLIMIT_CPU``, the deadline rounded up plus one second:
the kernel ends it even if the parent is gone), and its address space (``RLIMIT_AS``,
:data:`MEMORY_LIMIT_BYTES`).
"""

from __future__ import annotations

import io
import json
import logging
import math
import resource
import sys

MEMORY_LIMIT_BYTES = 2 * 1024**3
"""The child's address-space cap (2 GiB): pypdf's object cache of a 30 MB file stays well
under it, and a file built to make it grow without end is stopped."""


def limit(seconds: float) -> None:
    """Cap this process's CPU time at ``seconds`` (rounded up, plus one) and its memory."""
    cpu = math.ceil(seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT_BYTES:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, hard))


def count(data: bytes) -> dict[str, object]:
    """``{"pages": N, "encrypted": bool}`` for a PDF pypdf can read, else ``{"error":
    "unreadable"}``."""
    from pypdf import PdfReader

    logging.disable(logging.CRITICAL)  # pypdf reports its repairs through logging
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            return {"pages": 0, "encrypted": True}
        return {"pages": len(reader.pages), "encrypted": False}
    except (Exception, RecursionError, Warning):
        return {"error": "unreadable"}


def main() -> None:
    limit(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0)
    result = count(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
