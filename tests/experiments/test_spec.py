from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from decentopt.experiments import PRESETS, ConfigError, load_spec
from decentopt.experiments.sources import PRESET_DIR, parse_override

BASE = """
name = "tiny"
problem = "quadratic"
agents = 6
iterations = 50
runs = 2
[topology]
name = "ring"
[problem_params]
d = 3
p = 4
c = [1.0, 0.5]
[defaults]
lr = 0.05
beta = 0.8
[algorithms.ed]
[algorithms.edm]
[quick]
iterations = 10
"""

NEURAL = """
name = "tiny-train"
problem = "neural"
agents = 4
runs = 1
[problem_params]
dataset = "digits"
model = "small_cnn"
phi = 0.5
batch_size = 16
epochs = 3
milestones = [2]
backend = "loop"
[topology]
name = "ring"
[defaults]
lr = 0.1
beta = 0.9
[algorithms.ed]
[algorithms.edm]
"""


def write(tmp_path: Path, text: str, name: str = "cfg.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_presets_load_and_follow_the_paper():
    assert {"fig1", "fig2", "fig3", "fig4", "compare"} <= set(PRESETS)
    fig1 = load_spec("fig1")
    assert fig1.topology == {"name": "ring"} and fig1.agents == 32 and fig1.runs == 20
    assert fig1.params.sigma2 == 0.05 and fig1.params.c == (2.0, 1.0, 0.5, 0.25)
    assert all(v.hyperparams["lr"] == 0.05 for v in fig1.algorithms.values())
    assert len(fig1.algorithms) == 8
    fig2 = load_spec("fig2")
    assert fig2.params.m == 2000 and fig2.params.sigma_s2 == 0.01
    assert all(v.hyperparams["lr"] == 0.5 for v in fig2.algorithms.values())
    assert set(fig2.algorithms) == {"dmsgd", "dsgt", "dsgt_hb", "ed", "edm"}
    for name, phi, milestones in (("fig3", 1.0, (60, 80)), ("fig4", 0.1, (150, 180))):
        spec = load_spec(name)
        p = spec.params
        assert (p.dataset, p.model, spec.agents, p.batch_size) == ("cifar10", "vgg11", 16, 32)
        assert p.phi == phi and p.milestones == milestones and spec.runs == 3
        quick = load_spec(name, quick=True).params
        assert (quick.dataset, quick.model, quick.device) == ("digits", "small_cnn", "cpu")


def test_presets_document_every_unsaid_choice():
    # identifiers and the tables whose header comment explains them need no per-line reason
    exempt_keys = {"name", "description", "problem"}
    exempt_tables = {"seeds", "quick", "quick.problem_params", "claims"}
    for name in PRESETS:
        table, previous = "", ""
        for line in (PRESET_DIR / f"{name}.toml").read_text().splitlines():
            body = line.split("#")[0].strip()
            if body.startswith("["):
                table = body.strip("[]")
            elif "=" in body and table not in exempt_tables:
                key = body.split("=")[0].strip()
                if key not in exempt_keys:
                    commented = "#" in line or previous.lstrip().startswith("#")
                    assert commented, f"{name}: '{body}' has no reason comment"
            previous = line


def test_defaults_apply_only_where_valid(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    assert spec.algorithms["ed"].hyperparams == {"lr": 0.05}
    assert spec.algorithms["edm"].hyperparams == {"lr": 0.05, "beta": 0.8}
    assert spec.panel == "c"


def test_quick_and_overrides(tmp_path):
    path = write(tmp_path, BASE)
    assert load_spec(path, quick=True).iterations == 10
    spec = load_spec(path, overrides=["iterations=7", "algorithms.edm.beta=0.95", "name=x"])
    assert spec.iterations == 7 and spec.algorithms["edm"].hyperparams["beta"] == 0.95
    assert spec.name == "x"
    assert parse_override("topology.name=star") == {"topology": {"name": "star"}}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_spec(path, overrides=["iterations"])


def test_variants_and_grids(tmp_path):
    text = BASE + '[algorithms.edm_b99]\nmethod = "edm"\nbeta = 0.99\n[algorithms.dsgd]\n'
    text += "lr = [0.01, 0.05]\n"
    spec = load_spec(write(tmp_path, text))
    assert list(spec.algorithms) == ["ed", "edm", "edm_b99", "dsgd(lr=0.01)", "dsgd(lr=0.05)"]
    b99 = spec.algorithms["edm_b99"]
    assert b99.method == "edm" and b99.make().rule.beta == 0.99 and b99.make().lr == 0.05
    assert spec.algorithms["dsgd(lr=0.01)"].make().lr == 0.01
    # every variant has its own fingerprint; a grid over beta crosses with lr
    prints = {spec.fingerprint(label) for label in spec.algorithms}
    assert len(prints) == len(spec.algorithms)
    grid = load_spec(
        write(tmp_path, BASE + "[algorithms.dmsgd]\nlr = [0.1, 0.2]\nbeta = [0, 0.5]\n")
    )
    assert "dmsgd(lr=0.2, beta=0.5)" in grid.algorithms and len(grid.algorithms) == 6
    assert list(spec.select(["edm_b99", "ed"]).algorithms) == ["edm_b99", "ed"]
    with pytest.raises(ConfigError, match="did you mean 'edm_b99'"):
        spec.select(["edm-b99"])
    with pytest.raises(ConfigError, match="unknown method 'edx'"):
        load_spec(write(tmp_path, BASE + '[algorithms.mine]\nmethod = "edx"\n'))


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (("iterations = 50", "iteratons = 50"), "unknown key 'iteratons'"),
        (("iterations = 50", 'iterations = "many"'), "'iterations' must be a whole number"),
        (("iterations = 50", "iterations = 0"), "'iterations' must be >= 1"),
        (('problem = "quadratic"', 'problem = "lasso"'), "unknown problem 'lasso'"),
        (('name = "ring"', 'name = "mesh"'), "unknown topology 'mesh'"),
        (("p = 4", "q = 4"), r"\[problem_params\]: unknown key 'q'"),
        (("c = [1.0, 0.5]", "c = []"), "non-empty list"),
        (("c = [1.0, 0.5]", 'c = ["a"]'), r"\[problem_params\]: 'c' must be a list of numbers"),
        (("[algorithms.ed]", "[algorithms.adam]"), "unknown algorithm 'adam'"),
        (("lr = 0.05", "lr = -1.0"), r"\[algorithms.ed\].*step size"),
        (("beta = 0.8", "beta = 1.5"), r"\[algorithms.edm\].*beta"),
        (("[quick]", "[quick]\nfoo = 1\n[seeds]\nshuffle = 3"), r"\[seeds\]: unknown key"),
        (("[algorithms.edm]", "[algorithms.edm]\nmomentum = 0.9"), "unknown hyper-parameter"),
        (('name = "ring"', 'name = "ring"\nweight = 2'), r"\[topology\]: unknown key 'weight'"),
        (("agents = 6", "agents = 0"), "'agents' must be >= 1"),
        (("runs = 2", "runs = 2.5"), "'runs' must be a whole number, found 2.5"),
        (("runs = 2", 'runs = 2\nmetric = "dist"'), "unknown metric 'dist'"),
        (('name = "tiny"', 'name = "../../escaped"'), "'name' must be a plain file name"),
        (('name = "tiny"', 'name = "/tmp/x"'), "no path"),
        # labels name result folders: nothing outside --out may ever be touched
        (("[algorithms.ed]", '[algorithms.".."]\nmethod = "ed"'), "label must be a plain name"),
        (("[algorithms.ed]", '[algorithms."."]\nmethod = "ed"'), "label must be a plain name"),
        (("[algorithms.ed]", '[algorithms."x/y"]\nmethod = "ed"'), "label must be a plain name"),
        (("[algorithms.edm]", "[algorithms.edm]\nnesterov = 3"), "nesterov must be true or false"),
        (('name = "ring"', 'name = "ring"\nlazy = "maybe"'), r"\[topology\] \(ring\): lazy must"),
        (('name = "ring"', 'name = "ring"\nweights = "x"'), r"\[topology\] \(ring\): unknown"),
        (('name = "ring"', 'name = "erdos_renyi"\np = "abc"'), r"\[topology\].*p must be a real"),
        (('name = "ring"', 'name = "grid"\ncols = 4'), r"\[topology\].*cols = 4 does not divide"),
        (('name = "ring"', 'name = "base_graph"\nbase = 1'), r"\[topology\].*base must be"),
        (("[quick]", "[seeds]\ndata = 1180591620717411303424\n[quick]"), "'data' must be <="),
        (("[quick]", "[seeds]\nnoise = -1\n[quick]"), "'noise' must be >= 0"),
    ],
)
def test_bad_configs_name_the_problem(tmp_path, change, pattern):
    old, new = change
    assert old in BASE
    with pytest.raises(ConfigError, match=pattern) as info:
        load_spec(write(tmp_path, BASE.replace(old, new, 1)))
    assert str(tmp_path / "cfg.toml") in str(info.value)  # every error names the file


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (('dataset = "digits"', 'dataset = "mnist"'), "unknown dataset 'mnist'"),
        (('dataset = "digits"', 'dataset = "cifar10"'), "needs data_dir"),
        (('model = "small_cnn"', 'model = "resnet"'), "unknown model"),
        (("milestones = [2]", "milestones = [5]"), "milestones"),
        (("phi = 0.5", "phi = 0.0"), "'phi' must be > 0"),
        (("runs = 1", "rounds = 1"), "unknown key 'rounds'"),
        (("runs = 1", "runs = 1\niterations = 9"), "sized in epochs"),
        (('backend = "loop"', 'backend = "vmapp"'), "did you mean 'vmap'"),
        (("epochs = 3", "epochs = 3\nmin_share = -5"), "'min_share' must be >= 0"),
        (("epochs = 3", 'epochs = 3\ndevice = "foo"'), "'device' 'foo' is not a device"),
        (("epochs = 3", 'epochs = 3\ndevice = "meta"'), "holds no data"),
    ],
)
def test_bad_training_configs(tmp_path, change, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_spec(write(tmp_path, NEURAL.replace(*change)))


def test_names_of_0_2_are_refused_with_the_new_one(tmp_path):
    old = BASE.replace("runs = 2", "repetitions = 2")
    with pytest.raises(ConfigError, match=r"unknown key 'repetitions'.*runs"):
        load_spec(write(tmp_path, old))
    with pytest.raises(ConfigError, match="unknown key 'repetitions'"):
        load_spec(write(tmp_path, BASE), overrides=["repetitions=5"])


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="no configuration file"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(write(tmp_path, "iterations = = 3"))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_spec(binary)
    with pytest.raises(ConfigError, match=r"needs a \[quick\] table"):
        load_spec(write(tmp_path, BASE.replace("[quick]\niterations = 10", "")), quick=True)


def test_fingerprint_covers_every_setting_but_presentation(tmp_path):
    path = write(tmp_path, BASE)
    a = load_spec(path)
    b = load_spec(path, overrides=["algorithms.edm.beta=0.9"])
    assert a.fingerprint("ed") == b.fingerprint("ed")
    assert a.fingerprint("edm") != b.fingerprint("edm")
    for same in ("threshold=1e-5", 'name="other"', 'description="x"', 'metric="consensus"'):
        assert load_spec(path, overrides=[same]).fingerprint("edm") == a.fingerprint("edm"), same
    for changed in (
        "record_points=50",
        "seeds.noise=7",
        "seeds.graph=3",
        "runs=3",
        "agents=8",
        "problem_params.sigma2=0.1",
        'problem_params.dtype="float32"',
        'topology.name="star"',
        "iterations=51",
    ):
        assert load_spec(path, overrides=[changed]).fingerprint("edm") != a.fingerprint("edm"), (
            changed
        )
    assert a.fingerprint("edm", run=0) != a.fingerprint("edm", run=1)


def test_titles_say_what_ran():
    spec = load_spec("fig1")
    assert spec.title().endswith("the paper's Figure 1") and "ring of 32 agents" in spec.title()
    torus = load_spec("fig1", overrides=['topology.name="exponential"', "agents=36"])
    assert "exponential of 36 agents" in torus.title(modified=True)
    assert "Figure" not in torus.title(modified=True)
    title = load_spec("fig3", quick=True).title(modified=True)
    assert "small CNN / digits" in title and "VGG" not in title and "CIFAR" not in title
    assert "VGG-11 / CIFAR-10" in load_spec("fig3").title()


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (("d = 3", 'd = "ten"'), r"\[problem_params\]: 'd' must be a whole number, found 'ten'"),
        (("d = 3", "d = -3"), r"\[problem_params\]: 'd' must be >= 1, found -3"),
        (("p = 4", "p = 4\nsigma2 = -1.0"), r"\[problem_params\]: 'sigma2' must be >= 0"),
        (("p = 4", "p = 4\nsigma2 = nan"), r"'sigma2' must be a (finite )?number"),
        (("c = [1.0, 0.5]", "c = [1.0, nan]"), r"'c' must be a list of numbers"),
        (("c = [1.0, 0.5]", "c = [1.0, inf]"), r"'c' must be a list of numbers"),
        (("agents = 6", "agents = -3"), "'agents' must be >= 1, found -3"),
    ],
)
def test_problem_parameter_errors_name_the_file_and_key(tmp_path, change, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        load_spec(write(tmp_path, BASE.replace(*change, 1)))
    assert str(tmp_path / "cfg.toml") in str(info.value)


def test_absurd_sizes_are_refused_before_anything_is_written(tmp_path):
    from decentopt.experiments.runner import check_memory, run_spec

    huge = load_spec(write(tmp_path, BASE.replace("runs = 2", "runs = 100000000")))
    with pytest.raises(ConfigError, match=r"needs about [\d.,]+ GiB .* lower runs, agents") as info:
        run_spec(huge, tmp_path / "out", progress=False, log=lambda _: None)
    assert "GiB of memory are available" in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing written
    small = load_spec(write(tmp_path, BASE, "small.toml"))
    assert 0 < check_memory(small, available=1e12) < 2e8  # mostly fixed: libraries, figures
    with pytest.warns(UserWarning, match="will take days"):
        load_spec(write(tmp_path, BASE.replace("iterations = 50", "iterations = 1e12")))


def test_a_variant_may_run_on_a_graph_of_its_own(tmp_path):
    own = BASE + '[algorithms.sgp]\ntopology = "directed_ring"\n'
    own += '[algorithms.relay]\nmethod = "relaysgd"\ntopology = {name = "binary_tree"}\n'
    spec = load_spec(write(tmp_path, own))
    assert spec.algorithms["sgp"].topology == {"name": "directed_ring"}
    assert "symmetric" not in spec.build_topology("sgp").offers
    assert "tree" in spec.build_topology("relay").offers
    assert spec.algorithms["ed"].topology is None and spec.topology_of("ed") == spec.topology
    # a variant on the shared graph keeps the fingerprint it had before graphs of its own
    plain = load_spec(write(tmp_path, BASE, "plain.toml"))
    assert spec.fingerprint("ed") == plain.fingerprint("ed")
    moved = load_spec(
        write(tmp_path, own.replace('"directed_ring"', '"random_directed"'), "b.toml")
    )
    assert moved.fingerprint("sgp") != spec.fingerprint("sgp")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[algorithms.dmsgd]\ntopology = "directed_ring"\n', "dmsgd runs on a symmetric"),
        ("[algorithms.relaysgd]\n", r"relaysgd runs on a static tree.*topology = \"chain\""),
        ("[algorithms.sgp]\ntopology = 3\n", "give a graph's name or a table"),
        ('[algorithms.sgp]\ntopology = "moon"\n', "unknown topology 'moon'"),
        ('[algorithms.sgp]\ntopology = {name = "random_directed", q = 1}\n', "unknown key 'q'"),
    ],
)
def test_a_graph_a_method_cannot_run_on_is_refused_naming_the_variant(tmp_path, table, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_spec(write(tmp_path, BASE + table))
    assert "[algorithms." in str(info.value)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (
            ("[algorithms.ed]", '[algorithms.ed]\ntopolgy = "exponential"'),
            "unknown hyper-parameter 'topolgy'; did you mean 'topology'",
        ),
        (
            ('name = "ring"', 'name = "one_peer_exponential"\nbase = 3'),
            "one_peer_exponential takes no options .only its name.; remove 'base'",
        ),
        (
            ('name = "ring"', 'name = "ring"\nweigths = "metropolis"'),
            "did you mean 'weights'",
        ),
        (
            (
                "[algorithms.edm]",
                '[algorithms.r]\nmethod = "relaysgd"\ntopology = {name = '
                '"chain", n = 8}\n[algorithms.edm]',
            ),
            "'n' is not a key of chain: the number of agents is the specification's top-level",
        ),
        (
            ('problem = "quadratic"\n', ""),
            "",  # replaced below by a [problem] table
        ),
        (
            (
                "[algorithms.ed]",
                '[algorithms.c]\nmethod = "choco_dsgd"\ncompression = "sign(3)"\n[algorithms.ed]',
            ),
            "sign takes no value in parentheses",
        ),
    ],
)
def test_spec_mistakes_name_the_fix(tmp_path, change, pattern):
    text = BASE.replace(*change)
    if not pattern:  # the problem written as a table instead of a name
        text += '[problem]\nkind = "quadratic"\n'
        pattern = r'problem is a name, e.g. problem = "quadratic", with its settings in'
    with pytest.raises(ConfigError, match=pattern):
        load_spec(write(tmp_path, text))


def test_many_gossip_rounds_count_in_the_work_warning():
    # gradient tracking makes two rounds a step: its 2 x 10^9 are the most of compare's methods
    many = r"1e\+03 iterations × 2,000,000,000 gossip rounds each \(dsgt\)"
    spelling = r'write gossip = "multi_round\(1000000000'  # the key of earlier releases
    with pytest.warns(UserWarning, match=many), pytest.warns(FutureWarning, match=spelling):
        load_spec("compare", overrides=["iterations=1000", "mix_rounds=1000000000"])


def test_a_gossip_of_many_rounds_warns_of_the_work_as_mix_rounds_does():
    text = 'algorithms.dsgd.gossip="multi_round(1000000000)"'
    many = r"1e\+03 iterations × 1,000,000,000 gossip rounds each \(dsgd\)"
    with pytest.warns(UserWarning, match=many):
        load_spec("compare", overrides=["iterations=1000", text])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a few rounds a step: no warning
        load_spec("compare", overrides=["iterations=1000", text.replace("1000000000", "4")])


def test_a_delayed_gossip_s_history_is_in_the_memory_estimate():
    from decentopt.experiments.runner import check_memory, memory_parts

    plain = load_spec("compare", overrides=["iterations=20"]).select(["dsgd"])
    delayed = load_spec(
        "compare", overrides=["iterations=20", 'algorithms.dsgd.gossip="delayed(100000)"']
    ).select(["dsgd"])
    one = 32 * 20 * 10 * 8  # an iterate: 32 agents, 20 runs, d = 10, float64
    part = "delayed gossip's messages of past rounds"
    assert memory_parts(plain)[part] == 0
    assert memory_parts(delayed)[part] == 100_000 * one  # tau copies of the one value sent
    assert sum(memory_parts(delayed).values()) - sum(memory_parts(plain).values()) == 100_000 * one
    with pytest.raises(ConfigError, match=r"delayed gossip's messages of past rounds 4\.77 GiB"):
        check_memory(delayed, available=3 * 2**30)  # refused before anything is allocated
    assert check_memory(plain, available=3 * 2**30) > 0


def test_an_absurd_number_of_threads_is_one_line():
    with pytest.raises(ConfigError, match="threads"):
        load_spec("compare", overrides=["threads=1000000"])


@pytest.mark.parametrize("where", ["file", "override"])
def test_values_nested_too_deeply_are_one_line(tmp_path, where):
    deep = "[" * 5000 + "]" * 5000
    if where == "file":
        path = write(tmp_path, BASE.replace("runs = 2", f"runs = {deep}"))
        with pytest.raises(ConfigError, match="nested too deeply"):
            load_spec(path)
    else:
        with pytest.raises(ConfigError, match="nested too deeply"):
            load_spec("compare", overrides=[f"problem_params.c={deep}"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("compute = -0.01", r"\[timing\]: 'compute' must be > 0, found -0.01"),
        ("compute = 0", r"\[timing\]: 'compute' must be > 0, found 0"),
        ("compute = nan", r"\[timing\]: 'compute' must be a number, found nan"),
        ("compute = inf", r"\[timing\]: 'compute' must be a number, found inf"),
        ("factor = 0", r"\[timing\]: 'factor' must be >= 1, found 0"),
        ("noise = -1", r"\[timing\]: 'noise' must be >= 0, found -1"),
        ("bandwidth = 0", r"\[timing\]: 'bandwidth' must be > 0, found 0"),
        ("comput = 0.1", r"\[timing\]: unknown key 'comput'; did you mean 'compute'\?"),
        ("compute = 1e308", r"\[timing\]: TimeModel: compute must be .* got 1e\+308"),
        ("latency = 1e308", r"\[timing\]: TimeModel: latency must be .* got 1e\+308"),
        ("noise = 1e308", r"\[timing\]: TimeModel: noise must be >= 0 and <= 10 "),
        ("factor = 1e308", r"\[timing\]: TimeModel: factor must be .* got 1e\+308"),
        ("bandwidth = 5e-324", r"\[timing\]: TimeModel: bandwidth must be >= 0.001 "),
        ("seed = 99999999999999999999", r"\[timing\]: 'seed' must be <= 9223372036854775807"),
        ("slow = [99]", r"\[timing\]: slow agent 99 does not exist among agents = 6 \(numbered"),
    ],
)
def test_every_mistake_of_the_time_model_is_named_when_the_file_is_read(tmp_path, setting, message):
    text = BASE + f"[timing]\n{setting}\n"
    with pytest.raises(ConfigError, match=message) as info:
        load_spec(write(tmp_path, text))
    assert "must be TimeModel" not in str(info.value) and "\n" not in str(info.value)


def test_only_takes_a_grids_label_for_all_its_members(tmp_path):
    grid = BASE + '[algorithms.sweep]\nmethod = "edm"\nlr = [0.01, 0.02]\nbeta = [0.5, 0.9]\n'
    spec = load_spec(write(tmp_path, grid))
    members = [k for k in spec.algorithms if k.startswith("sweep(")]
    assert len(members) == 4
    assert list(spec.select(["sweep"]).algorithms) == members
    assert list(spec.select(["ed", "sweep"]).algorithms) == ["ed", *members]
    one = "sweep(lr=0.01, beta=0.5)"
    assert list(spec.select([one]).algorithms) == [one]  # a member alone still works
    with pytest.raises(ConfigError, match=r"unknown algorithm 'swep'; did you mean 'sweep'\?"):
        spec.select(["swep"])  # the grid's label is suggested, not one member


def test_the_title_says_which_methods_a_momentum_is_for():
    spec = load_spec("compare", quick=True)
    assert spec.title().endswith("α = 0.05, β = 0.9 (the methods with momentum)")
    assert spec.select(["edm", "dmsgd"]).title().endswith("α = 0.05, β = 0.9")  # all have one
    assert "β" not in spec.select(["dsgd", "ed"]).title()


def test_an_outer_optimizer_is_a_key_of_a_run_or_a_grid(tmp_path):
    text = BASE + '[algorithms.dsgd]\nouter = ["nesterov(every=4)", "nesterov(1, 0, every=8)"]\n'
    spec = load_spec(write(tmp_path, text))
    first, second = (spec.algorithms[k] for k in spec.algorithms if k.startswith("dsgd"))
    assert (first.make().outer.every, second.make().outer.lr) == (4, 1.0)
    assert first.make().name == "dsgd+nesterov"
    assert spec.fingerprint(first.label) != spec.fingerprint(second.label)
    bad = BASE + '[algorithms.dsgd]\nouter = "nesterov(beta=2, every=4)"\n'
    with pytest.raises(ConfigError, match=r"\[algorithms.dsgd\]: dsgd: nesterov: beta") as info:
        load_spec(write(tmp_path, bad))
    assert "\n" not in str(info.value)
