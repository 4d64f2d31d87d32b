"""Real animation into a training set: `animegamer ingest` (shot cuts, clips, motion levels, annotations).

video.py (decode any file ffmpeg reads at the model's fps and size) < shots.py (cuts and clips,
streamed) < annotations.py (the template a person completes, and applying it) < build.py (the
resumable ingest that writes the world's dataset format) < cli.py.
"""
