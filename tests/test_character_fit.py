"""Reading a character's parameters back from a picture of it (world/character_fit.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from animegamer.game.characters import CharacterBook, figure_mask
from animegamer.world.character_fit import fit_character, sheet_layout
from animegamer.world.character_gen import held_out_characters, random_character, reference_sheet


def _reuploaded(sheet: np.ndarray) -> np.ndarray:
    """Saved from the page, enlarged and compressed: what a player's upload of a sheet looks like."""
    buf = io.BytesIO()
    Image.fromarray(sheet).resize((300, 300), Image.BILINEAR).save(buf, format="JPEG", quality=80)
    return np.asarray(Image.open(buf).convert("RGB"))


@pytest.mark.parametrize("index", [1, 3, 6])  # characters with a hat, with nothing, with a ribbon
def test_a_held_out_character_is_read_back_from_its_reuploaded_sheet(index):
    true = held_out_characters(index + 1)[index]
    picture = _reuploaded(reference_sheet(true, 256))
    alpha = figure_mask(picture)
    assert sheet_layout(alpha)
    start = random_character(99, true.name)
    fit = fit_character(picture, alpha, start)
    got = fit.spec
    assert (got.hair_style, got.outfit_type) == (true.hair_style, true.outfit_type)
    assert sorted(a.type for a in got.accessories) == sorted(a.type for a in true.accessories)
    for field in ("hair_color", "top", "skin"):  # JPEG moves colours a little, not more
        assert np.abs(np.subtract(getattr(got, field), getattr(true, field))).max() <= 12, field
    assert abs(got.height - true.height) <= 0.025 and fit.error < 0.1
    assert got.name == true.name and got.pronoun == start.pronoun  # a picture does not say; the start's is kept
    assert fit.read[0] == f"{true.hair_style.replace('_', ' ')} hair"


def test_a_tight_crop_keeps_the_start_height_and_reads_the_rest():
    """A picture that is not a sheet does not show the height; everything else is read as from a sheet."""
    true = held_out_characters(4)[3]
    sheet = reference_sheet(true, 256)
    ys, xs = np.nonzero(figure_mask(sheet))
    crop = sheet[ys.min() - 6:ys.max() + 6, xs.min() - 6:xs.max() + 6].copy()
    crop[figure_mask(crop) == 0] = 255  # on white
    alpha = figure_mask(crop)
    assert not sheet_layout(alpha)
    start = random_character(99, true.name)
    fit = fit_character(crop, alpha, start)
    assert (fit.spec.hair_style, fit.spec.outfit_type) == (true.hair_style, true.outfit_type)
    assert fit.spec.height == start.height


def test_a_seam_between_two_background_colours_is_not_the_character():
    """A reference sheet's ground strip, blurred by resizing, must not join the figure to the picture's sides."""
    picture = _reuploaded(reference_sheet(held_out_characters(1)[0], 256))
    ys, xs = np.nonzero(figure_mask(picture))
    assert xs.max() - xs.min() < 0.6 * picture.shape[1] and ys.max() < picture.shape[0] - 1


def test_fit_refuses_a_mask_of_another_size():
    with pytest.raises(ValueError, match="mask"):
        fit_character(np.zeros((10, 10, 3), np.uint8), np.zeros((5, 5), np.uint8), random_character(1, "A"))


def test_a_picture_the_generator_cannot_draw_is_said_so(tmp_path):
    """A figure unlike the world's characters (a plain orange disc on white) is still read into parameters,
    but its fit error is high and the player is told."""
    picture = np.full((200, 200, 3), 255, np.uint8)
    yy, xx = np.mgrid[:200, :200]
    picture[(yy - 100) ** 2 + (xx - 100) ** 2 < 60 ** 2] = (240, 120, 20)
    Image.fromarray(picture).save(tmp_path / "disc.png")
    made = CharacterBook(tmp_path).add("Disc", image=tmp_path / "disc.png")
    assert made.posed and made.fit["error"] > 0.12 and "not much like the world's drawings" in made.fit_note
    assert CharacterBook(tmp_path).characters()["Disc"].fit_note == made.fit_note


def test_a_hat_the_sheet_crops_stays_part_of_the_figure():
    """A tall hat through the picture's top edge touches the border; only the border's common colours are
    background, so the hat is not flooded away, and the fit reads it."""
    true = held_out_characters(28)[27]  # a witch hat taller than the sheet
    sheet = reference_sheet(true, 256)
    alpha = figure_mask(sheet)
    assert (alpha[0] > 0).any()  # the figure reaches the top edge
    fit = fit_character(sheet, alpha, random_character(99, true.name))
    assert [a.type for a in fit.spec.accessories] == ["witch_hat"] and fit.spec.hair_style == true.hair_style
