"""`flashlab traffic` and `flashlab tiles` write valid PNG / GIF files and reject bad options by name."""
import pytest

pytest.importorskip("matplotlib")
PIL = pytest.importorskip("PIL.Image")

from flashlab.viz.cli import parse_bytes, tiles_main, traffic_main  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _valid_png(path):
    assert path.read_bytes().startswith(PNG_MAGIC), f"{path.name} is not a PNG file"
    with PIL.open(path) as image:
        image.verify()


@pytest.mark.parametrize("pass_, extra", [("forward-fa1", ["--causal"]), ("backward", ["--nq", "48", "--nk", "40"])])
def test_tiles_writes_png_and_animated_gif(tmp_path, pass_, extra, capsys):
    code = tiles_main(["--n", "64", "--d", "8", "--block-q", "16", "--block-k", "16", "--pass", pass_,
                       "--sram", "48KiB", "--frames", "5", "--out", str(tmp_path), *extra])
    assert code == 0, capsys.readouterr().err
    _valid_png(tmp_path / f"tiles_{pass_}.png")
    _valid_png(tmp_path / f"reuse_{pass_}.png")
    with PIL.open(tmp_path / f"tiles_{pass_}.gif") as gif:
        assert gif.format == "GIF"
        assert gif.n_frames == 5, "one GIF frame per requested step"
    printed = capsys.readouterr().out.split()
    assert sorted(printed) == sorted(str(p) for p in tmp_path.iterdir())


def test_traffic_writes_the_four_figures(tmp_path, capsys):
    code = traffic_main(["--n", "1024", "--traced-n", "128", "--d", "16", "--sram", "32768", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["moved_vs_touched.png", "roofline.png", "traffic_vs_n.png", "traffic_vs_sram.png"]
    for name in names:
        _valid_png(tmp_path / name)


@pytest.mark.parametrize("main, argv, option", [
    (tiles_main, ["--d", "0"], "--d"),
    (tiles_main, ["--sram", "12 parsecs"], "--sram"),
    (tiles_main, ["--pass", "sideways"], "--pass"),
    (tiles_main, ["--itemsize", "3"], "--itemsize"),
    (tiles_main, ["--n", "32", "--block-q", "16", "--step", "999"], "--step"),
    (traffic_main, ["--block-k", "-4"], "--block-k"),
    (traffic_main, ["--sram", "64", "--d", "64"], "--sram"),
])
def test_invalid_options_exit_2_and_name_the_option(main, argv, option, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert option in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert tiles_main(["--help"]) == 0
    assert "--block-q" in capsys.readouterr().out


def test_sizes_parse_in_bytes_kib_and_mib():
    assert parse_bytes("233472") == 228 * 1024
    assert parse_bytes("228KiB") == parse_bytes("228k") == 228 * 1024
    assert parse_bytes("1MiB") == 2**20
    for bad in ("0", "1.5", "-3", "12x"):
        with pytest.raises(Exception, match="size|positive"):
            parse_bytes(bad)
