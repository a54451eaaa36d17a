"""bench/chart.py's headline chart: every label and value inside the figure, one bar per pipeline."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from bench import chart

#: images/s of the five pipelines, as a classification run's rows report them.
RATES = {"Pillow ImageFolder, float32": 652.0,
         "torchvision decode_jpeg, float32 (usual recipe)": 836.0,
         "torchvision decode_jpeg, uint8": 1119.0,
         "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8": 1283.0,
         "custom_op.EncodedJpeg + v2.RandomResizedCrop, uint8, prepared": 2450.0,
         "decoder alone, 1 process x 2 threads (upper bound)": 1593.0}


def results(kinds=("real", "generated")) -> dict:
    config = {"size": 224, "width": 500, "height": 375, "workers": 2, "batch_size": 64,
              "rounds": 3}
    rows = [{"config": name, "median_images_per_s": rate} for name, rate in RATES.items()]
    return {"argv": ["classification"], "machine": {"cpu": "Test CPU", "usable_cores": 2},
            "classification": {kind: {"config": config, "configs": rows} for kind in kinds}}


def test_headline_has_five_bars_with_their_claims_inside_the_figure():
    figure = chart.headline_figure(results())
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        page = figure.bbox
        axes = figure.axes[0]
        texts = [*axes.texts, *figure.texts, *axes.get_yticklabels(), axes.xaxis.label]
        for text in texts:
            box = text.get_window_extent(renderer)
            assert page.x0 <= box.x0 and box.x1 <= page.x1 + 0.5, text.get_text()
            assert page.y0 <= box.y0 and box.y1 <= page.y1 + 0.5, text.get_text()
        assert figure.get_size_inches()[0] * figure.dpi == pytest.approx(800)
        assert len(axes.patches) == 5  # the decoder-alone row is not a pipeline
        values = [text.get_text() for text in axes.texts]
        assert values[2].strip() == "1119/s  1.34x the usual recipe"  # the recipe's gain
        assert values[3].strip() == "1283/s  1.15x torchvision uint8"  # the decoder's
        assert values[4].strip() == "2450/s  2.19x torchvision uint8"  # prepared files'
        assert "real 500 x 375" in figure.texts[0].get_text()
    finally:
        plt.close(figure)


def test_headline_falls_back_to_generated_images_and_needs_the_part(tmp_path):
    figure = chart.headline_figure(results(kinds=("generated",)))
    assert "generated 500 x 375" in figure.texts[0].get_text()
    plt.close(figure)
    assert chart.draw_headline({"machine": {}}, tmp_path / "none.png") is None
    drawn = chart.draw_headline(results(), tmp_path / "headline.png")
    assert drawn.read_bytes().startswith(b"\x89PNG")
