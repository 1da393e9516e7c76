"""MkDocs hooks (mkdocs.yml's `hooks`): README.md and CHANGELOG.md join the site from the repository root, so the
site and GitHub show the same files, and a link between repository files becomes a link between site pages."""

from __future__ import annotations

import os
import posixpath
import re

from mkdocs.structure.files import File

# Repository-root pages: their path in the repository -> their page in the site.
ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}
DOCS = "docs/"
_LINK = re.compile(r"\]\(([^)\s#:]+\.md)(#[^)\s]*)?\)")


def on_files(files, config):
    root = os.path.dirname(config.config_file_path)
    for path, uri in ROOT_PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=os.path.join(root, path)))
    return files


def _repository_path(uri: str) -> str:
    """The repository path of the page at `uri` in the site."""
    return {uri: path for path, uri in ROOT_PAGES.items()}.get(uri, DOCS + uri)


def _site_uri(path: str) -> str | None:
    """The site page of the repository file at `path`, None if the site has none."""
    if path in ROOT_PAGES:
        return ROOT_PAGES[path]
    return path[len(DOCS) :] if path.startswith(DOCS) else None


def on_page_markdown(markdown, page, config, files):
    """Rewrites each relative link to a Markdown file, written for the repository, into one for the site; a link to
    a file the site lacks is left for `mkdocs build --strict` to report."""
    here = posixpath.dirname(_repository_path(page.file.src_uri))

    def site_link(match: re.Match) -> str:
        uri = _site_uri(posixpath.normpath(posixpath.join(here, match[1])))
        if uri is None:
            return match[0]
        relative = posixpath.relpath(uri, posixpath.dirname(page.file.src_uri) or ".")
        return f"]({relative}{match[2] or ''})"

    return _LINK.sub(site_link, markdown)
