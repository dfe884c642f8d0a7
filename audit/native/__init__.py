"""Which native library a process loads, decided as glibc's dynamic loader decides it.

Facts are gathered by readers; one loader model resolves them. The modules:

PURE (standard library only, Python 3.9 syntax; vendored into images for the in-build guard:
``VENDORED`` in ``audit/render/guard.py``):

- :mod:`audit.native.elf`: the facts of one ELF file (machine, SONAME, DT_NEEDED, DT_RPATH,
  DT_RUNPATH, the versions and symbols it needs and defines), frozen, with a JSON round trip.
- :mod:`audit.native.ldcache`: ``/etc/ld.so.cache`` (its file format) and ``ld.so.conf``.
- :mod:`audit.native.fsview`: a filesystem as the loader sees it (facts by path, symbolic
  links, folder listings), with symlink resolution that stops on loops.
- :mod:`audit.native.search`: one ``ld.so`` search for one name (RPATH, LD_LIBRARY_PATH,
  RUNPATH, the cache, the default folders, ``$ORIGIN``/``$LIB``/``$PLATFORM``).
- :mod:`audit.native.process`: a process: loads in order, dependencies breadth first, names
  already mapped reused; the answer says, for each mapped file, why.
- :mod:`audit.native.pyrules`: what Python packages do before the loader does (torch's preload
  of the ``nvidia`` wheels, cupy's and jax's), each rule sourced.
- :mod:`audit.native.catalog`: the CUDA family: every library NVIDIA ships in wheels, the
  toolkit and distribution packages, with its owner and version.
- :mod:`audit.native.versions`: the versioned-symbol rule (typed findings, no false positives).
- :mod:`audit.native.scene`: the facts of one environment bundled (view, loader settings,
  owners, the interpreter) with a JSON round trip, and the replay of a recorded process.
- :mod:`audit.native.bridge`: a snapshot's ``system`` (with the loader facts the in-image
  script records) to its native libraries with the model's loads (imports the pure core).

HOST (pyelftools or a live filesystem):

- :mod:`audit.native.elfread`: ELF facts with pyelftools, from a path or from a non-seekable
  stream of known size in bounded memory.
- :mod:`audit.native.gather`: a scene read from a live filesystem.
- :mod:`audit.native.kit`: the ground-truth kit run inside a real CUDA Python environment.

Edge: elfread, gather, kit
"""
