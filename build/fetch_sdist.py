#!/usr/bin/env python3
"""Download a pinned sdist through pip's configured index, verify its sha256, unpack it.

Usage: fetch_sdist.py PACKAGE FILENAME SHA256 SIZE DEST_DIR

`pip download` cannot fetch flash-attn's sdist (building its metadata imports torch), so this
reads the file link from the package's page on the index pip is configured with (PEP 503 simple
API) and downloads it with urllib. No index host is written here: it comes from PIP_INDEX_URL,
`pip config list`, or pip's own default. On success DEST_DIR/<sdist root>/ exists and
DEST_DIR/.complete holds the sha256; the unpack goes through a temporary directory and a rename,
so an interrupted run never leaves a half tree that looks complete.
"""
import hashlib
import html.parser
import os
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request


def fail(message):
    sys.stderr.write(f"fetch_sdist: {message}\n")
    sys.exit(1)


def pip_config_index_url():
    """The index-url pip would use from its configuration files or PIP_* environment."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = None
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith(".index-url"):
            # pip lists files before env; the environment (":env:") wins when present.
            found = value.strip().strip("'\"")
            if key.startswith(":env:"):
                break
    return found


def pip_default_index_url():
    """pip's built-in default index, asked from the installed pip."""
    try:
        from pip._internal.models.index import PyPI  # pylint: disable=import-outside-toplevel
        return PyPI.simple_url
    except Exception:  # pip missing or its internals moved
        pass
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--help"],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    marker = "(default "
    at = out.find(marker, out.find("--index-url"))
    if at < 0:
        return None
    return out[at + len(marker):].split(")", 1)[0].strip()


def index_url():
    url = os.environ.get("PIP_INDEX_URL") or pip_config_index_url() or pip_default_index_url()
    if not url:
        fail("cannot tell which package index pip uses: install pip (python3 -m pip) "
             "or set PIP_INDEX_URL, or set FLASH_ATTN_ROCM_CK_DIR to a composable_kernel tree")
    return url.rstrip("/") + "/"


def ssl_context():
    cafile = os.environ.get("PIP_CERT")
    return ssl.create_default_context(cafile=cafile if cafile and os.path.exists(cafile) else None)


class LinkParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def find_file_link(index, package, filename):
    page_url = urllib.parse.urljoin(index, package.lower().replace("_", "-") + "/")
    with urllib.request.urlopen(page_url, context=ssl_context(), timeout=120) as response:
        page = response.read().decode("utf-8", "replace")
    parser = LinkParser()
    parser.feed(page)
    for href in parser.links:
        path = urllib.parse.urlparse(href).path
        if path.rsplit("/", 1)[-1] == filename:
            return urllib.parse.urljoin(page_url, href)
    fail(f"{filename} is not listed on the index page of {package} ({page_url})")


def download(url, target, size):
    with urllib.request.urlopen(url, context=ssl_context(), timeout=600) as response, \
            open(target, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    got = os.path.getsize(target)
    if got != size:
        fail(f"downloaded {got} bytes from {url}, expected {size}")


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def unpack(archive, dest, sha256):
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".unpack-", dir=parent)
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(staging, filter="data")
        else:  # Python < 3.12 without extraction filters; the archive is sha256-pinned
            tar.extractall(staging)
    with open(os.path.join(staging, ".complete"), "w") as f:
        f.write(sha256 + "\n")
    if is_complete(dest, sha256):
        # Another build unpacked it meanwhile: keep theirs, it may be in use.
        shutil.rmtree(staging)
        return
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.rename(staging, dest)


def is_complete(dest, sha256):
    try:
        with open(os.path.join(dest, ".complete")) as f:
            return f.read().strip() == sha256
    except OSError:
        return False


def main():
    if len(sys.argv) != 6:
        fail(__doc__.strip().splitlines()[2])
    package, filename, sha256, size, dest = sys.argv[1:]
    index = index_url()
    url = find_file_link(index, package, filename)
    sys.stderr.write(f"fetch_sdist: downloading {url}\n")
    with tempfile.TemporaryDirectory() as tmp:
        archive = os.path.join(tmp, filename)
        download(url, archive, int(size))
        got = sha256_of(archive)
        if got != sha256:
            fail(f"sha256 mismatch for {filename}: got {got}, pinned {sha256}")
        unpack(archive, dest, sha256)


if __name__ == "__main__":
    main()
