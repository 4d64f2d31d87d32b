import cv2
import numpy as np
import pytest

from animegamer.world.flow import MotionQuantizer, flow_magnitude


def _moving_disc(speed: float, pan: float = 0.0, n: int = 9, disc: bool = True) -> np.ndarray:
    rng = np.random.default_rng(0)
    texture = rng.integers(90, 200, (96, 400, 3), dtype=np.uint8)
    texture = cv2.GaussianBlur(texture, (0, 0), 3)
    frames = []
    for i in range(n):
        off = int(round(pan * i))
        f = np.ascontiguousarray(texture[:, off:off + 144])
        if disc:
            cv2.circle(f, (int(30 + speed * i), 48), 12, (230, 40, 40), -1, cv2.LINE_AA)
        frames.append(f)
    return np.stack(frames)


def test_flow_grows_with_speed():
    mags = [flow_magnitude(_moving_disc(v)) for v in (0.0, 1.0, 3.0, 6.0)]
    assert mags[0] < 0.3
    assert mags == sorted(mags), mags


def test_camera_pan_alone_is_not_character_motion():
    panned_empty = flow_magnitude(_moving_disc(0.0, pan=4.0, disc=False))
    moving = flow_magnitude(_moving_disc(4.0))
    assert panned_empty < 0.3 < moving


def test_flow_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        flow_magnitude(np.zeros((1, 8, 8, 3), np.uint8))


def test_quantizer_levels_and_fit(tmp_path):
    q = MotionQuantizer((0.1, 0.2, 0.3, 0.4))
    assert [q.level(v) for v in (0.0, 0.15, 0.25, 0.35, 0.9)] == [1, 2, 3, 4, 5]
    fitted = MotionQuantizer.fit(np.linspace(0, 1, 1001))
    counts = np.bincount([fitted.level(v) for v in np.linspace(0, 1, 1001)], minlength=6)[1:]
    assert counts.min() >= 190
    fitted.save(tmp_path / "levels.json", fitted_on="test")
    assert MotionQuantizer.load(tmp_path / "levels.json") == fitted
    with pytest.raises(ValueError, match="increasing"):
        MotionQuantizer((0.3, 0.2, 0.4, 0.5))
