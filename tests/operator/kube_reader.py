"""Reads objects the way ``kubectl get KIND [NAME] -n NS -o json`` (optionally ``--as=USER``) does, without a
kubectl process.

Why: the operator tests wait by polling (``Harness.wait`` every 0.3 s, each check a ``Harness.get``). A
kubectl fork costs about 0.1 s of CPU (measured: 86 ms of CPU and 100 ms of wall time per call on the 2-core
box at a load of 5; an in-process GET 4 ms and 10 ms), so a few tests waiting at once spent most of a core
forking kubectl beside the apiserver, etcd and the operator under test. This is a plain HTTPS GET with the
kubeconfig's client certificate.

KIND is resolved as kubectl resolves it (plural, singular, kind or short name, optionally ``.group`` or
``.version.group``) from the apiserver's discovery, read once per control plane and again when a name is not
found (a CRD applied later). When a name is ambiguous or unknown, :meth:`KubeReader.get` says so
(:data:`UNRESOLVED`) and the caller asks kubectl, so no answer ever differs from kubectl's.

``user`` impersonates as ``kubectl --as=USER`` does (the ``Impersonate-User`` header): the hostile-tenant
tests poll what a tenant can see, and a refused read is None as kubectl's failure is.

It also does the two things the tests most often fork kubectl for without kubectl being the subject:
``kubectl get ... -o json``'s text (:func:`kubectl_json`, for the ``kubectl`` fixture of tests/conftest.py)
and the create of ``kubectl apply`` of an object not there yet (:meth:`KubeReader.create_as_applied`, for
``Harness.apply``). A kubectl fork is mostly its own start-up and, for ``apply``, the OpenAPI document it
parses to check that the server validates fields; both are the CPU of a run that is CPU-bound.

Each thread keeps one keep-alive HTTPS connection per reader: a new TLS connection per GET (``urlopen``) made
the apiserver do a full handshake for each of the waits' thousands of polls, a measurable share of its CPU on
a run that is CPU-bound (docs/benchmarks/test-durations.md, "apiserver CPU"). When a reused connection
fails (the apiserver closed it meanwhile), a GET is sent once more on a new one.
"""

from __future__ import annotations

import base64
import copy
import http.client
import io
import json
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

UNRESOLVED: Final = object()
#: What ``kubectl apply`` keeps of the manifest it applied, to compute the next apply's patch.
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
#: Go's encoding/json escapes these in strings (HTML-safe output); Python's json does not.
_GO_ESCAPES: Final = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _go_json(obj: Any, indent: int | None) -> str | None:
    """``obj`` as Go's encoding/json writes a map of it (sorted keys, HTML-escaped, UTF-8 as is): with
    ``indent`` as ``json.MarshalIndent``, else compact as ``json.Encoder`` (with its newline). None when
    ``obj`` holds a float, which the two languages write differently (``5.0`` against ``5``)."""

    def exact(value: Any) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and exact(v) for k, v in value.items())
        if isinstance(value, list):
            return all(exact(v) for v in value)
        return value is None or isinstance(value, str | bool | int)

    if not exact(obj):
        return None
    separators = (",", ": ") if indent else (",", ":")
    text = json.dumps(obj, indent=indent, separators=separators, sort_keys=True, ensure_ascii=False)
    return text.translate(_GO_ESCAPES) + "\n"


def kubectl_json(obj: dict[str, Any]) -> str | None:
    """What ``kubectl get ... -o json`` prints for ``obj`` (as :meth:`KubeReader.read` returns it: the object,
    or the ``List`` of a read without a name), or None when this cannot be exact (a float in it)."""
    return _go_json(obj, indent=4)


class ReadError(Exception):
    """A read that kubectl would have failed on, other than the named object not being there."""


def _not_found(body: str, name: str) -> bool:
    """A 404's Status says that the object ``name`` is not found (not that the resource type is unknown)."""
    try:
        status = json.loads(body)
    except ValueError:
        return False
    if not isinstance(status, dict):
        return False
    details = status.get("details") or {}
    return bool(status.get("reason") == "NotFound" and details.get("name") == name)


#: client-go's default number of retries of an answer with Retry-After.
_RETRIES = 10


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """The delay a 429 or 5xx answer asks for (client-go's rule: such a status with a Retry-After header),
    None when it is not to be retried."""
    if exc.code != 429 and exc.code < 500:
        return None
    value = exc.headers.get("Retry-After") if exc.headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    def path(self, namespace: str, name: str = "") -> str:
        """The object's path; without ``name``, the list's."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        scope = f"/namespaces/{namespace}" if self.namespaced else ""
        return f"{base}{scope}/{self.plural}/{name}".removesuffix("/")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class KubeReader:
    """GETs against one control plane; thread-safe (the harness calls it from ``asyncio.to_thread``)."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.server = str(cluster["server"]).rstrip("/")
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        ctx = ssl.create_default_context(cadata=ca)
        with tempfile.TemporaryDirectory(prefix="capmaas-reader-") as tmp:
            cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            ctx.load_cert_chain(str(cert), str(key))
        self._ssl = ctx
        contexts = cfg.get("contexts") or []
        # The namespace kubectl uses without -n, when the kubeconfig is as plain as the dev cluster's (one
        # cluster, user and context, no namespace in it: "default"); None for any other kubeconfig.
        plain = len(cfg["clusters"]) == len(cfg["users"]) == len(contexts) == 1
        self.default_namespace = "default" if plain and not contexts[0]["context"].get("namespace") else None
        parts = urllib.parse.urlsplit(self.server)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 443
        self._local = threading.local()  # .conn: this thread's keep-alive connection
        self._lock = threading.Lock()
        self._names: dict[str, set[Resource]] = {}
        self._discovered = 0.0

    def get(
        self, kind: str, name: str, namespace: str, *, user: str | None = None
    ) -> dict[str, Any] | object | None:
        """The object, None when kubectl would fail (not found, or any error), or :data:`UNRESOLVED`."""
        resource = self._resolve(kind)
        if resource is None:
            return UNRESOLVED
        try:
            obj = self._json(resource.path(namespace, name), user)
        except (OSError, ValueError):  # HTTPError (404, 403, ...) and URLError are OSErrors
            return None
        # kubectl get -o json leaves managedFields out (--show-managed-fields defaults to false).
        obj.get("metadata", {}).pop("managedFields", None)
        return obj

    def items(
        self, kind: str, namespace: str, *, user: str | None = None
    ) -> list[dict[str, Any]] | object | None:
        """The ``items`` of ``kubectl get KIND -n NS -o json`` (each with its ``apiVersion`` and ``kind``, as
        kubectl fills them in), None when kubectl would fail, or :data:`UNRESOLVED`."""
        resource = self._resolve(kind)
        if resource is None:
            return UNRESOLVED
        try:
            items = self._json(resource.path(namespace), user).get("items")
        except (OSError, ValueError):
            return None
        if not isinstance(items, list):
            return None
        for obj in items:
            obj.get("metadata", {}).pop("managedFields", None)
            obj.setdefault("apiVersion", resource.api_version)
            obj.setdefault("kind", resource.kind)
        return items

    def read(
        self, kind: str, namespace: str, name: str = "", selector: str = ""
    ) -> dict[str, Any] | object | None:
        """Strictly as ``kubectl get KIND [NAME] -n NS [-l SELECTOR] -o json``: the object (without a name, a
        ``List`` of the items), None when the named object is not found, :data:`UNRESOLVED` when KIND does not
        resolve; any other failure (another status, a 404 that is not the object's, no answer) raises
        :class:`ReadError`, as kubectl's exit status would. For the e2e waits (``tests/e2e/e2e_support``),
        which tell a missing object from a failing read."""
        resource = self._resolve(kind)
        if resource is None:
            return UNRESOLVED
        path = resource.path(namespace, name)
        if selector:
            path += "?" + urllib.parse.urlencode({"labelSelector": selector})
        for attempt in range(_RETRIES + 1):
            try:
                obj = self._json(path)
                break
            except urllib.error.HTTPError as exc:
                body = exc.read().decode(errors="replace")
                if name and exc.code == 404 and _not_found(body, name):
                    return None
                # As kubectl (client-go) does: a 429 (or 5xx) with Retry-After is retried after that delay,
                # up to 10 times (a CRD just made answers 429 "storage is (re)initializing" for a moment).
                delay = _retry_after(exc)
                if delay is None or attempt == _RETRIES:
                    raise ReadError(f"GET {path}: {exc.code} {body[:500]}") from exc
                time.sleep(delay)
            except (OSError, ValueError) as exc:
                raise ReadError(f"GET {path}: {exc}") from exc
        if name:
            obj.get("metadata", {}).pop("managedFields", None)
            return obj
        items = obj.get("items") or []
        for item in items:
            item.get("metadata", {}).pop("managedFields", None)
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}

    def send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> int:
        """A write (``POST``, ``DELETE``, a ``PATCH`` with its ``content_type``, ...) of ``body`` as JSON to
        ``path``; the HTTP status, error or not (0 when the apiserver could not be reached). For the
        fixtures' own plain writes (a namespace, a status patch)."""
        data = None if body is None else json.dumps(body).encode()
        try:
            status, _, _, _ = self._request(method, path, {"Content-Type": content_type}, data)
        except (OSError, http.client.HTTPException):
            return 0
        return status

    def create_as_applied(
        self, obj: dict[str, Any], namespace: str | None, *, user: str | None = None
    ) -> str | None:
        """``kubectl [--as=USER] [-n NAMESPACE] apply -f -`` of ``obj`` when it does not exist yet,
        in-process: what kubectl's client-side apply sends then, a GET of the object (not found) and its
        create (the object in its namespace with kubectl's last-applied annotation, field manager
        ``kubectl-client-side-apply``, strict field validation as ``--validate=strict``), as USER when
        given. The line kubectl prints (``KIND.GROUP/NAME created``) when created. None when kubectl is to
        apply it: the object exists (kubectl patches it then) or cannot be read, the create is refused
        (kubectl's error is then the one raised), or it is outside what this copies of kubectl (a kind that
        does not resolve to exactly ``obj``'s, another namespace than -n's, a namespace on a cluster-scoped
        object, ``generateName``, a float, an annotation that is not a string). ``namespace`` None: no -n
        (the object's own namespace, else the kubeconfig's default)."""
        meta = obj.get("metadata")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not (isinstance(meta, dict) and isinstance(api_version, str) and isinstance(kind, str)):
            return None
        name, annotations = meta.get("name"), meta.get("annotations") or {}
        if not (isinstance(name, str) and name) or "generateName" in meta or "resourceVersion" in meta:
            return None
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            return None
        group, _, version = api_version.rpartition("/")
        resource = self._resolve(f"{kind}.{version}.{group}" if group else kind)
        if resource is None or (resource.kind, resource.api_version) != (kind, api_version):
            return None
        body = copy.deepcopy(obj)
        own = meta.get("namespace")
        if not resource.namespaced:
            if own is not None:
                return None
            target = ""
        else:
            target = namespace or own or self.default_namespace or ""
            if not target or (namespace is not None and own not in (None, namespace)):
                return None
            body["metadata"]["namespace"] = target
        # kubectl's util.CreateApplyAnnotation: the manifest (its namespace filled in, its own last-applied
        # annotation left out, an absent annotations map made empty) as Go encodes it, then that text as the
        # annotation of what it creates.
        kept = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        body["metadata"]["annotations"] = kept
        last = _go_json(body, indent=None)
        if last is None:
            return None
        body["metadata"]["annotations"] = {**kept, LAST_APPLIED: last}
        headers = {} if user is None else {"Impersonate-User": user}
        try:
            status, _, _, answer = self._request("GET", resource.path(target, name), headers)
            if status != 404 or not _not_found(answer.decode(errors="replace"), name):
                return None
            query = urllib.parse.urlencode(
                {"fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"}
            )
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
            status, _, _, _ = self._request("POST", f"{resource.path(target)}?{query}", headers, data)
        except (OSError, http.client.HTTPException):
            return None
        if status != 201:
            return None
        return f"{kind.lower()}{'.' + group if group else ''}/{name} created\n"

    def delete_object(self, obj: dict[str, Any]) -> bool:
        """``kubectl delete -f - --ignore-not-found --wait=false`` of the manifest ``obj`` (its own namespace,
        background propagation as kubectl's default cascade): True when it is deleted or was not there;
        False when kubectl is to do it (a kind that does not resolve to exactly ``obj``'s, a refusal, ...)."""
        meta = obj.get("metadata")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not (isinstance(meta, dict) and isinstance(api_version, str) and isinstance(kind, str)):
            return False
        name, namespace = meta.get("name"), meta.get("namespace") or self.default_namespace
        group, _, version = api_version.rpartition("/")
        resource = self._resolve(f"{kind}.{version}.{group}" if group else kind)
        if resource is None or (resource.kind, resource.api_version) != (kind, api_version):
            return False
        if not isinstance(name, str) or not name or (resource.namespaced and not namespace):
            return False
        path = resource.path(namespace or "", name)
        return self.send("DELETE", path, {"propagationPolicy": "Background"}) in (200, 202, 404)

    def drop_finalizers(self, plural: str, namespace: str) -> None:
        """``kubectl patch PLURAL --all -n NAMESPACE --type=merge -p '{"metadata":{"finalizers":null}}'``,
        failures ignored: nothing of that kind blocks the namespace's deletion."""
        items = self.items(plural, namespace)
        for obj in items if isinstance(items, list) else ():
            path = self.path(plural, namespace, obj["metadata"]["name"])
            if path is not None:
                patch = {"metadata": {"finalizers": None}}
                self.send("PATCH", path, patch, content_type="application/merge-patch+json")

    def path(self, kind: str, namespace: str, name: str = "") -> str | None:
        """The API path of ``kind`` (resolved as :meth:`get` does), None when it does not resolve."""
        resource = self._resolve(kind)
        return None if resource is None else resource.path(namespace, name)

    def _json(self, path: str, user: str | None = None) -> dict[str, Any]:
        """The JSON object at ``path``; an error status raises :class:`urllib.error.HTTPError` (with the
        answer's body and headers), as ``urlopen`` did."""
        headers = {} if user is None else {"Impersonate-User": user}
        try:
            status, reason, answer_headers, body = self._request("GET", path, headers)
        except http.client.HTTPException as exc:
            raise OSError(f"GET {path}: {exc!r}") from exc
        if status >= 400:
            url = self.server + path
            raise urllib.error.HTTPError(url, status, reason, answer_headers, io.BytesIO(body))
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a JSON object")
        return data

    def _request(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None = None
    ) -> tuple[int, str, http.client.HTTPMessage, bytes]:
        """One request on this thread's keep-alive connection: status, reason, headers, body."""
        for attempt in range(2):
            conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=30, context=self._ssl)
                self._local.conn = conn
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._local.conn = None
                # A reused connection may have been closed meanwhile: a GET is sent again on a new one; a
                # write only when nothing can have been taken (the peer had closed it).
                closed_meanwhile = isinstance(
                    exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                )
                if reused and attempt == 0 and (method == "GET" or closed_meanwhile):
                    continue
                raise
            if resp.will_close:
                conn.close()
                self._local.conn = None
            return resp.status, resp.reason, resp.headers, data
        raise AssertionError("unreachable")

    def _resolve(self, kind: str) -> Resource | None:
        key = kind.lower()
        with self._lock:
            found = self._names.get(key)
            if not found and time.monotonic() - self._discovered > 2.0:
                self._discover()
                found = self._names.get(key)
        if found is None or len(found) != 1:
            return None
        return next(iter(found))

    def _discover(self) -> None:
        names: dict[str, set[Resource]] = {}

        def add(resources: list[dict[str, Any]], group: str, version: str, preferred: bool) -> None:
            for r in resources:
                if "/" in r["name"]:  # a subresource (status, scale)
                    continue
                res = Resource(group, version, r["name"], bool(r.get("namespaced")), r["kind"])
                forms = {r["name"], r.get("singularName") or "", r["kind"], *r.get("shortNames", ())}
                for form in {f.lower() for f in forms if f}:
                    if group:
                        names.setdefault(f"{form}.{version}.{group}", set()).add(res)
                    if preferred:
                        names.setdefault(form, set()).add(res)
                        if group:
                            names.setdefault(f"{form}.{group}", set()).add(res)

        add(self._json("/api/v1")["resources"], "", "v1", True)
        for g in self._json("/apis")["groups"]:
            preferred = g["preferredVersion"]["version"]
            for v in g["versions"]:
                version = v["version"]
                try:
                    listing = self._json(f"/apis/{g['name']}/{version}")
                except (OSError, ValueError):  # a group whose API is unavailable: kubectl skips it too
                    continue
                add(listing.get("resources", []), g["name"], version, version == preferred)
        self._names = names
        self._discovered = time.monotonic()


_READERS: dict[str, KubeReader] = {}
_READERS_LOCK = threading.Lock()


def reader(kubeconfig: Path) -> KubeReader:
    """One reader (and one discovery) per kubeconfig for the whole pytest process."""
    with _READERS_LOCK:
        found = _READERS.get(str(kubeconfig))
        if found is None:
            found = _READERS[str(kubeconfig)] = KubeReader(kubeconfig)
        return found


def apply_objects(
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    kubeconfig: Path,
    objs: list[dict[str, Any]],
    namespace: str | None = None,
    *,
    user: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``kubectl [--as=USER] [-n NAMESPACE] apply -f -`` of ``objs``, in order, with ``kubectl`` (the
    fixture's callable). Each object not there yet is created in-process as kubectl's apply creates it
    (:meth:`KubeReader.create_as_applied`); from the first one it does not create (one that exists, a
    refused one, ...), kubectl applies the rest, so an update and a failure are kubectl's own. kubectl is
    given JSON, not YAML, so that both ways see the same values (a YAML reader may take an unquoted
    ``6906e3`` for a number). kubectl's CompletedProcess, its stdout after the lines of the objects created
    in-process."""
    api = reader(kubeconfig)
    created: list[str] = []
    rest = list(objs)
    while rest:
        line = api.create_as_applied(rest[0], namespace, user=user)
        if line is None:
            break
        created.append(line)
        rest.pop(0)
    args = [
        *([f"--as={user}"] if user else []),
        *(["-n", namespace] if namespace else []),
        "apply",
        "-f",
        "-",
    ]
    if not rest:
        return subprocess.CompletedProcess(["kubectl", *args], 0, "".join(created), "")
    proc = kubectl(*args, input="\n".join(json.dumps(o) for o in rest), check=check)
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, "".join(created) + proc.stdout, proc.stderr
    )


def apply_manifests(
    kubectl: Callable[..., subprocess.CompletedProcess[str]], objs: list[dict[str, Any]]
) -> None:
    """``kubectl apply -f -`` of ``objs`` as the admin: through :func:`apply_objects` when ``kubectl`` is the
    session fixture (it names its kubeconfig), else one kubectl of them as a JSON ``List``."""
    kubeconfig = getattr(kubectl, "kubeconfig", None)
    if kubeconfig is None:
        kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    else:
        apply_objects(kubectl, Path(kubeconfig), objs)
