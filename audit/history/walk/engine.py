"""Images of the Docker engine, through the docker SDK: inspected, exported only when needed.

The engine is the one every Docker call of the command talks to
(:func:`audit.docker.container.daemon`: ``--docker-host``, ``$DOCKER_HOST`` or the docker
context). ``images.get(ref)`` gives the image id and its diff-ids; when the config (by image id)
and every layer's delta (by diff-id) are known, nothing is exported: that is a second walk.
Otherwise ``image.save()`` (what ``docker save`` streams) is read chunk by chunk as the engine
writes it; a helper thread keeps reading the socket while the walk parses, so the engine never
waits on the walk (at most :data:`READ_AHEAD` chunks are held).

Invariants: the image is never pulled, run or written anywhere; an image the engine lacks is
exit 3 with how to make or load it (:func:`audit.docker.container.missing_image`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from audit.docker.container import missing_image
from audit.errors import EnvironmentProblem
from audit.history.walk.archive import ArchiveReader, ArchiveResult, NeedsRescan
from audit.history.walk.source import Fetched, Known, SourceSettings, pair_layers
from audit.redact import redact

CHUNK = 1 << 20
READ_AHEAD = 32  # chunks: 32 MiB at most between the socket and the walk
_END = object()


def fetch_engine(
    ref: str, client_factory: Callable[[], Any], settings: SourceSettings, known: Known
) -> Fetched:
    """The image ``ref`` of the engine ``client_factory()`` connects to."""
    client = client_factory()
    image = _image(client, ref)
    attrs: dict[str, Any] = image.attrs
    image_id = str(attrs.get("Id", ""))
    diff_ids = [str(d) for d in (attrs.get("RootFS") or {}).get("Layers") or ()]
    tags = tuple(str(t) for t in attrs.get("RepoTags") or ())
    config = known.config(image_id)
    if config is not None and all(known.has(d) for d in diff_ids):
        return Fetched(config, {}, tags, 0, exported=False)
    try:
        result = _export(image, ref, settings, known, plan=True)
    except NeedsRescan:
        result = _export(image, ref, settings, known, plan=False)
    fetched = pair_layers(result.selection, result.blobs, known, f"engine image {ref}",
                          result.size, exported=True)  # fmt: skip
    return Fetched(fetched.config, fetched.deltas, tags, fetched.size, True)


def _image(client: Any, ref: str) -> Any:
    import docker
    import requests

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise missing_image(ref) from None
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        raise EnvironmentProblem(
            f"the Docker engine cannot inspect {redact(ref)}: {_reason(exc)}",
            "check that the daemon answers (docker info) and the reference is right",
        ) from None


def _export(
    image: Any, ref: str, settings: SourceSettings, known: Known, *, plan: bool
) -> ArchiveResult:
    import docker
    import requests

    reader = ArchiveReader(
        platform=None, host=settings.host, known=known.has, plan=plan,
        elf_reader=settings.elf_reader, families=settings.families,
    )  # fmt: skip
    where = f"engine image {redact(ref)}"
    try:
        with settings.errors(where):
            for chunk in read_ahead(image.save(chunk_size=CHUNK, named=False), READ_AHEAD):
                reader.feed(chunk)
            return reader.finish()
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        raise EnvironmentProblem(
            f"the Docker engine stopped exporting {redact(ref)}: {_reason(exc)}",
            "check the daemon (docker info) and its disk, then walk again",
        ) from None


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return redact(text[:200])


def read_ahead(chunks: Iterable[bytes], depth: int) -> Iterator[bytes]:
    """``chunks`` as they are, read by a helper thread at most ``depth`` ahead of the caller.

    An exception of the producer comes out here, in order. A caller that stops early (an error
    while parsing) stops the helper: it closes ``chunks`` (the engine's response) at its next
    step and ends; nobody waits for it."""
    box: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        source = iter(chunks)
        try:
            for chunk in source:
                if stop.is_set() or not _put(box, chunk, stop):
                    break
            else:
                _put(box, _END, stop)
        except BaseException as exc:  # handed over to the consumer, raised there
            _put(box, exc, stop)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    threading.Thread(target=produce, name="walk-read-ahead", daemon=True).start()
    try:
        while True:
            item = box.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stop.set()


def _put(box: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    """Put ``item`` unless the consumer stopped first (then False)."""
    while not stop.is_set():
        try:
            box.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False
