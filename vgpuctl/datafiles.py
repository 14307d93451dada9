"""The package's data files (vgpuctl/data/*.yaml), read fast.

Each YAML file, the one people read, edit and cite (gpusim reads the catalogue too), has a JSON twin in
data/parsed/: the data the YAML parses to, with the sha256 of the YAML bytes it was made from. The twin is read in
the YAML's place while it was made from the YAML's current bytes: parsing the catalogue's YAML took a `plan`
process 0.05 s and the network rules' 0.03 s, their JSON takes 2 ms. A twin that is missing, unreadable or made
from other bytes is passed by and the YAML is parsed, as it always was, so an edited YAML file is never read
stale. `python -m vgpuctl.datafiles` writes the twins; a unit test fails while one is out of date.
"""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

TWIN_FOLDER = "parsed"


def data_folder() -> Path:
    return Path(str(resources.files("vgpuctl").joinpath("data")))


def twin_path(path: Path) -> Path:
    """Where a YAML data file's JSON twin is: data/parsed/<name>.json beside data/<name>.yaml."""
    return path.parent / TWIN_FOLDER / f"{path.stem}.json"


def load_yaml_data(path: Path) -> Any:
    """A YAML data file's data: its twin's when the twin was made from the file's current bytes, else the YAML's.
    Raises OSError when the file cannot be read and yaml.YAMLError when it does not parse."""
    raw = path.read_bytes()
    found, data = _twin_data(twin_path(path), hashlib.sha256(raw).hexdigest())
    return data if found else parse_yaml(raw)


def parse_yaml(raw: bytes) -> Any:
    import yaml

    return yaml.load(raw.decode("utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _twin_data(twin: Path, digest: str) -> tuple[bool, Any]:
    try:
        document = json.loads(twin.read_bytes())
    except (OSError, ValueError):
        return False, None
    if not isinstance(document, dict) or document.get("sha256") != digest or "data" not in document:
        return False, None
    return True, document["data"]


def twin_text(path: Path) -> str:
    """The JSON twin of a YAML data file, as `write_twins` writes it. Raises ValueError for data JSON cannot hold
    as the YAML gives it (a key that is not a string, a date)."""
    raw = path.read_bytes()
    data = parse_yaml(raw)
    try:
        text = json.dumps({"source": path.name, "sha256": hashlib.sha256(raw).hexdigest(), "data": data},
                          indent=1, ensure_ascii=False)
    except TypeError as err:
        raise ValueError(f"{path.name}: JSON cannot hold its data ({err})") from None
    if json.loads(text)["data"] != data:
        raise ValueError(f"{path.name}: its data does not come back the same from JSON (a key that is not a string?)")
    return text + "\n"


def yaml_files(folder: Path | None = None) -> list[Path]:
    return sorted((folder or data_folder()).glob("*.yaml"))


def stale_twins(folder: Path | None = None) -> list[Path]:
    """The YAML data files whose twin is missing or not what `write_twins` would write now."""
    stale = []
    for path in yaml_files(folder):
        twin = twin_path(path)
        if not twin.is_file() or twin.read_text(encoding="utf-8") != twin_text(path):
            stale.append(path)
    return stale


def write_twins(folder: Path | None = None) -> list[Path]:
    """Write every YAML data file's twin; returns the twins written."""
    written = []
    for path in yaml_files(folder):
        twin = twin_path(path)
        twin.parent.mkdir(exist_ok=True)
        twin.write_text(twin_text(path), encoding="utf-8")
        written.append(twin)
    return written


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vgpuctl.datafiles",
                                     description="Write the JSON twin of each data file (vgpuctl/data/parsed/).")
    parser.parse_args(argv)
    for twin in write_twins():
        print(twin, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
