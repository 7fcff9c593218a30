"""Files people send with a message (screenshots, PDFs, logs), read for one turn, never kept.

- :mod:`core.files.refs`: :class:`FileRef` (a file not yet read) and the placeholder line
  stored instead of it (``[image: screenshot.png, 142 KB]``);
- :mod:`core.files.fetch`: the download rule (size caps, allowed origins, no redirect
  elsewhere, timeout), or a local path's bytes;
- :mod:`core.files.prepare`: bytes to Claude content blocks within the Messages API's
  limits (types sniffed, images scaled down, PDF pages counted, text checked);
- :mod:`core.files.reader`: :class:`FileReader`, the rule per message and the sentences
  for files not read.
"""

from core.files.reader import FileReader, ReadFiles, gone_note, not_read
from core.files.refs import FileRef, placeholder, placeholder_names, with_placeholders

__all__ = [
    "FileReader",
    "FileRef",
    "ReadFiles",
    "gone_note",
    "not_read",
    "placeholder",
    "placeholder_names",
    "with_placeholders",
]
