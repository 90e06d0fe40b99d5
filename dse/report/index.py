"""``dashboards/index.html``: one offline page listing every campaign dashboard in the folder,
then every profile page (``dse profile``).

A dashboard states its campaign, trial count and devices in ``<meta>`` tags of its ``<head>``
(:func:`dashboard_meta_html` writes them, :func:`read_dashboard_meta` reads them back), so the
index needs nothing but the dashboards folder: no study, no run folder. A page without them (from
an older dse) is still listed, by file name, with its figures shown as unknown. A profile page
says which trial it profiles in tags of its own (:func:`profile_meta_html`), and is listed apart.
"""

from __future__ import annotations

import html
import os
import stat
from collections.abc import Sequence
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from dse.util import atomic_write_text

INDEX_FILE = "index.html"
CAMPAIGN_META = "dse-campaign"
TRIALS_META = "dse-trials"
DEVICES_META = "dse-devices"
DESCRIPTION_META = "dse-description"
# A profile page's tags: a label for people, then each part on its own for the index.
PROFILE_META = "dse-profile"
PROFILE_CAMPAIGN_META = "dse-profile-campaign"
PROFILE_DEVICE_META = "dse-profile-device"
PROFILE_TRIAL_META = "dse-profile-trial"
PROFILE_BACKEND_META = "dse-profile-backend"
UNKNOWN = "—"
# A dashboard's head is its title, these tags and a short style block; plotly.js comes later.
_HEAD_BYTES = 64 * 1024

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem 2rem; color: #222; }
.meta, .empty { color: #555; }
table { border-collapse: collapse; font-size: 0.95rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.8rem; text-align: left; }
td.number { text-align: right; }
th { background: #f4f4f4; }
"""


class ProfileMeta(NamedTuple):
    """The trial a profile page profiles."""

    campaign: str
    device: str
    trial: int
    backend: str


class DashboardMeta(NamedTuple):
    """What a dashboard says about itself; ``None`` where the page does not say."""

    title: str | None
    campaign: str | None
    trials: int | None
    devices: list[str] | None
    profile: ProfileMeta | None = None
    """Set on a profile page, None on a campaign dashboard."""
    description: str | None = None
    """What the campaign is for, when the page says."""


class DashboardEntry(NamedTuple):
    """One row of the index."""

    name: str
    """The campaign, or the file name without ``.html`` when the page does not name it."""
    file: str
    title: str | None
    trials: int | None
    devices: list[str] | None
    modified: datetime
    """The file's last modification, local time."""
    description: str | None = None


class ProfileEntry(NamedTuple):
    """One row of the index's profiles table."""

    profile: ProfileMeta
    file: str
    modified: datetime


def dashboard_meta_html(campaign: str, trials: int, devices: Sequence[str],
                        description: str = "") -> str:
    """The ``<meta>`` tags a dashboard's ``<head>`` carries for the index."""
    tags = [(CAMPAIGN_META, campaign), (TRIALS_META, str(trials)),
            (DEVICES_META, ", ".join(devices))]
    if description:
        tags.append((DESCRIPTION_META, description))
    return "\n".join(f'<meta name="{name}" content="{html.escape(value)}">'
                     for name, value in tags)


def profile_meta_html(profile: ProfileMeta) -> str:
    """The ``<meta>`` tags a profile page's ``<head>`` carries for the index."""
    tags = [(PROFILE_META, f"{profile.campaign}/{profile.device}/trial {profile.trial}"),
            (PROFILE_CAMPAIGN_META, profile.campaign), (PROFILE_DEVICE_META, profile.device),
            (PROFILE_TRIAL_META, str(profile.trial)), (PROFILE_BACKEND_META, profile.backend)]
    return "\n".join(f'<meta name="{name}" content="{html.escape(value)}">'
                     for name, value in tags)


class _HeadParser(HTMLParser):
    """Collects ``<title>`` and the ``<meta name=... content=...>`` pairs of a page's head."""

    def __init__(self) -> None:
        super().__init__()
        self.meta: dict[str, str] = {}
        self.title: str | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title, self.title = True, ""
        elif tag == "meta":
            values = dict(attrs)
            name, content = values.get("name"), values.get("content")
            if name is not None and content is not None:
                self.meta[name] = content

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title and self.title is not None:
            self.title += data


def read_dashboard_meta(path: Path) -> DashboardMeta:
    """Read the title and the dse ``<meta>`` tags from the head of the page at ``path``
    (only its first 64 KiB are read: a dashboard of thousands of trials is megabytes)."""
    with path.open("rb") as file:
        head = file.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    end = head.lower().find("</head>")
    parser = _HeadParser()
    parser.feed(head if end < 0 else head[:end])
    meta = parser.meta
    trials = meta.get(TRIALS_META, "")
    devices = meta.get(DEVICES_META)
    return DashboardMeta(
        title=parser.title.strip() if parser.title else None,
        campaign=meta.get(CAMPAIGN_META) or None,
        trials=int(trials) if trials.isdigit() else None,
        devices=None if devices is None else [d.strip() for d in devices.split(",")
                                               if d.strip()],
        profile=_profile(meta),
        description=meta.get(DESCRIPTION_META) or None)


def _profile(meta: dict[str, str]) -> ProfileMeta | None:
    """The profiled trial, when the page names campaign, device and trial number."""
    campaign, device = meta.get(PROFILE_CAMPAIGN_META), meta.get(PROFILE_DEVICE_META)
    trial = meta.get(PROFILE_TRIAL_META, "")
    if not campaign or not device or not trial.isdigit():
        return None
    return ProfileMeta(campaign, device, int(trial), meta.get(PROFILE_BACKEND_META, ""))


def _regular_inside(path: Path, root: Path) -> bool:
    """A regular file that stays inside ``root`` once links are resolved: reading a FIFO named
    ``x.html`` would block the index for ever, and a link out would show another file's head."""
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([base, real]) != base:
        return False
    try:
        return stat.S_ISREG(os.stat(real).st_mode)
    except OSError:
        return False


def dashboard_entries(dashboards_dir: Path) -> list[DashboardEntry]:
    """Every campaign dashboard in ``dashboards_dir`` (``*.html`` but the index itself, profile
    pages and the hidden temporary files of an atomic write), sorted by name."""
    return _entries(dashboards_dir)[0]


def profile_entries(dashboards_dir: Path) -> list[ProfileEntry]:
    """Every profile page in ``dashboards_dir``, by campaign, device and trial."""
    return _entries(dashboards_dir)[1]


def _entries(dashboards_dir: Path) -> tuple[list[DashboardEntry], list[ProfileEntry]]:
    """The folder's pages read once, each head once: campaign dashboards, then profile pages."""
    entries, profiles = [], []
    for path in dashboards_dir.glob("*.html"):
        if path.name == INDEX_FILE or path.name.startswith(".") \
                or not _regular_inside(path, dashboards_dir):
            continue
        try:
            meta = read_dashboard_meta(path)
            modified = datetime.fromtimestamp(path.stat().st_mtime)
        except FileNotFoundError:  # removed between the listing and the read
            continue
        if meta.profile is not None:
            profiles.append(ProfileEntry(meta.profile, path.name, modified))
            continue
        entries.append(DashboardEntry(meta.campaign or path.stem, path.name, meta.title,
                                      meta.trials, meta.devices, modified, meta.description))
    return (sorted(entries, key=lambda entry: (entry.name, entry.file)),
            sorted(profiles, key=lambda entry: (entry.profile, entry.file)))


def index_html(entries: Sequence[DashboardEntry], profiles: Sequence[ProfileEntry] = ()) -> str:
    """The index page: one row per dashboard, then (when there are any) one per profile page,
    linked relatively so the folder can move."""
    rows = []
    for entry in entries:
        link = f'<a href="{html.escape(quote(entry.file))}">{html.escape(entry.name)}</a>'
        trials = UNKNOWN if entry.trials is None else str(entry.trials)
        devices = UNKNOWN if entry.devices is None else ", ".join(entry.devices) or UNKNOWN
        # What the campaign is for; a page without one shows its title, unless that is the
        # campaign's name again.
        about = entry.description or ("" if entry.title in (None, entry.name) else entry.title)
        cells = [(link, ""), (html.escape(about or ""), ""),
                 (trials, ' class="number"'), (html.escape(devices), ""),
                 (entry.modified.isoformat(sep=" ", timespec="seconds"), "")]
        rows.append("<tr>" + "".join(f"<td{cls}>{cell}</td>" for cell, cls in cells) + "</tr>")
    if rows:
        body = ("<table>\n<thead><tr><th>campaign</th><th>description</th><th>trials</th>"
                "<th>devices</th><th>last modified</th></tr></thead>\n<tbody>\n"
                + "\n".join(rows) + "\n</tbody>\n</table>")
    else:
        body = ('<p class="empty">no dashboards yet: `dse run` and `dse report` write them '
                "here</p>")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head>\n<meta charset="utf-8">',
        "<title>dse dashboards</title>",
        f"<style>{_STYLE}</style>\n</head>",
        "<body>",
        "<h1>dse dashboards</h1>",
        f'<p class="meta">{len(entries)} campaign dashboard(s)</p>',
        body,
        *_profiles_html(profiles),
        "</body>\n</html>\n",
    ])


def _profiles_html(profiles: Sequence[ProfileEntry]) -> list[str]:
    """The profiles table: which trial of which campaign on which device, and its page."""
    if not profiles:
        return []
    rows = []
    for entry in profiles:
        profile = entry.profile
        link = f'<a href="{html.escape(quote(entry.file))}">profile</a>'
        cells = [(html.escape(profile.campaign), ""), (html.escape(profile.device), ""),
                 (str(profile.trial), ' class="number"'),
                 (html.escape(profile.backend) or UNKNOWN, ""), (link, ""),
                 (entry.modified.isoformat(sep=" ", timespec="seconds"), "")]
        rows.append("<tr>" + "".join(f"<td{cls}>{cell}</td>" for cell, cls in cells) + "</tr>")
    return ["<h2>Profiles</h2>",
            f'<p class="meta">{len(profiles)} profiled trial(s) (dse profile)</p>',
            "<table>\n<thead><tr><th>campaign</th><th>device</th><th>trial</th><th>backend</th>"
            "<th>page</th><th>last modified</th></tr></thead>\n<tbody>\n"
            + "\n".join(rows) + "\n</tbody>\n</table>"]


def write_index(dashboards_dir: Path) -> Path:
    """Write ``dashboards_dir/index.html`` listing every dashboard and profile page there
    (atomically: a browser reloading it never sees half a page); returns its path."""
    return atomic_write_text(dashboards_dir / INDEX_FILE,
                             index_html(*_entries(dashboards_dir)))
