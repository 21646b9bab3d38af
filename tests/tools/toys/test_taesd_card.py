"""A tiny autoencoder's model card: the committed READMEs are the template's output from each run's
log, and the command it gives names only the changed numbers."""

import json
import re
from pathlib import Path

import pytest

from sdaccel.tools.toys.taesd_card import readme_text, refresh_readme, remake_command
from sdaccel.tools.toys.taesd_config import LOG_NAME, TaesdConfig

REPO = Path(__file__).resolve().parents[3]
SHIPPED = ["tiny-shapes-sdxl-taesd", "tiny-shapes-sd15-taesd"]


def without_versions(text: str) -> str:
    """The card without the installed diffusers and torch versions."""
    return re.sub(r"diffusers \S+, torch\n\S+ CPU", "diffusers V, torch\nV CPU", text)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_committed_card_is_the_template_output(name):
    folder = Path("checkpoints") / name
    if not (REPO / folder).is_dir():
        pytest.skip("no shipped tiny autoencoder")
    log = json.loads((REPO / folder / LOG_NAME).read_text())
    committed = (REPO / folder / "README.md").read_text()
    assert without_versions(readme_text(folder, log)) == without_versions(committed)


def test_refresh_readme_writes_the_card_again_from_the_log(tmp_path):
    shipped = REPO / "checkpoints" / SHIPPED[0]
    if not shipped.is_dir():
        pytest.skip("no shipped tiny autoencoder")
    (tmp_path / LOG_NAME).write_text((shipped / LOG_NAME).read_text())
    written = refresh_readme(tmp_path)
    assert written == tmp_path / "README.md" and written.read_text().startswith(f"# {tmp_path.name}\n")


def test_the_command_names_only_the_changed_numbers():
    config = TaesdConfig(width=8, steps=100)
    assert remake_command(Path("base"), Path("out"), config, Path("lora")) == (
        "python -m sdaccel.tools.toys.distill_taesd base out --lora lora --steps 100 --width 8"
    )
    assert remake_command(Path("base"), Path("out"), TaesdConfig(), None) == (
        "python -m sdaccel.tools.toys.distill_taesd base out"
    )
