"""``selfmind eval``: measure memory quality with the user's own Claude key.

    selfmind eval reflection --data DIR [--conversations conv-26 ...] [--sessions N]
        [--model ID ...] [--judge-model ID] [--offline-match] [--yes] [--json] [--out FILE]

Registered by :mod:`bots.cli` as ``app.add_typer(eval_app, name="eval")``. The work lives in
:mod:`core.evaluation`; this module parses options, asks for confirmation, shows progress
and prints the table. Errors print one line to stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.errors import ConfigError, SelfMindError

if TYPE_CHECKING:
    # Imported where used, so that `selfmind --help` loads neither the SDK nor pydantic.
    import anthropic

    from core.evaluation.estimate import Estimate
    from core.evaluation.locomo import Conversation
    from core.evaluation.reflection_eval import Checkpoint, ModelReport
    from core.settings import Settings
    from core.store.seams import Store

logger = logging.getLogger(__name__)

eval_app = typer.Typer(help="Measure memory quality (uses your Claude key).", no_args_is_help=True)


@eval_app.command("dedupe")
def eval_dedupe(
    ctx: typer.Context,
    threshold: Annotated[
        float | None,
        typer.Option(help="The rule's Jaccard screen (default: SELFMIND_DEDUPE_THRESHOLD)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Also print the report as one JSON object, last.")
    ] = False,
) -> None:
    """Score the dedupe rule on the labelled pairs shipped with SelfMind (offline, no key).

    The same table as 'python bench/dedupe.py': false merges (distinct pairs called
    duplicates) and duplicate recall, for the rule and for plain Jaccard at 0.6 / 0.7 / 0.8,
    on the tune and holdout splits and on all pairs.
    """
    from core.evaluation.dedupe import evaluate, format_table, load_pairs

    if threshold is None:
        threshold = _settings(ctx).dedupe_threshold
    if not 0.0 < threshold <= 1.0:
        raise _fail(f"--threshold must be in (0, 1], got {threshold}")
    report = evaluate(load_pairs(), threshold=threshold)
    typer.echo(format_table(report))
    if as_json:
        typer.echo(json.dumps(report.as_dict()))


@eval_app.command("about")
def eval_about(
    as_json: Annotated[
        bool, typer.Option("--json", help="Also print the report as one JSON object, last.")
    ] = False,
) -> None:
    """Score the offline rule for whose fact a memory is on the labelled cases shipped with
    SelfMind (offline, no key).

    The same table as 'python bench/about.py': the share right on whose fact it is (the
    user's, another person's, or a hypothetical: no fact) and on the stored text, per split
    (the held-out third apart) and per kind of case.
    """
    from core.evaluation.about import evaluate, format_table, load_cases

    report = evaluate(load_cases())
    typer.echo(format_table(report))
    if as_json:
        typer.echo(json.dumps(report))


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _settings(ctx: typer.Context) -> Settings:
    from core.settings import Settings, load_settings

    obj = ctx.find_root().obj
    settings = getattr(obj, "settings", None)
    return settings if isinstance(settings, Settings) else load_settings()


def _slug(model: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in model)


@eval_app.command("reflection")
def reflection(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Folder of LoCoMo conv-*.json files (e.g. a download)."),
    ] = None,
    conversations: Annotated[
        list[str] | None,
        typer.Option("--conversations", help="Only these: conv-26,conv-30 (or repeat it)."),
    ] = None,
    sessions: Annotated[
        int | None, typer.Option("--sessions", min=1, help="Only the first N sessions of each.")
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option("--model", help="Reflection model (repeat to compare; default setting)."),
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option("--judge-model", help="Judge model (default: the chat model).")
    ] = None,
    offline_match: Annotated[
        bool, typer.Option("--offline-match", help="Score by word overlap, no judge calls.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask to confirm.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="End with one JSON line.")] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Keep finished work here (JSON Lines); run again to resume."),
    ] = None,
) -> None:
    """Run the product's reflection over LoCoMo turn by turn and score what it stores."""
    import anthropic

    from core.evaluation.locomo import load_all

    settings = _settings(ctx)
    if ctx.find_root().params.get("log_level") is None:
        logging.getLogger().setLevel(logging.WARNING)
    if settings.anthropic_api_key is None:
        raise _fail("ANTHROPIC_API_KEY is not set")
    if data is None:
        raise _fail("give --data DIR: a folder of LoCoMo conv-*.json files", 2)
    names = [n.strip() for value in conversations or [] for n in value.split(",") if n.strip()]
    try:
        convs = load_all(data, names or None)
    except (OSError, ValueError, KeyError) as exc:
        raise _fail(f"cannot load LoCoMo from {data}: {exc}") from None
    missing = sorted(set(names) - {c.name for c in convs})
    if missing:
        raise _fail(f"not in {data}: {', '.join(missing)}", 2)
    chosen = list(dict.fromkeys(models or [settings.reflection_model]))
    judge = None if offline_match else (judge_model or settings.chat_model)
    try:
        code = asyncio.run(
            _run(settings, convs, sessions, chosen, judge, yes=yes, as_json=as_json, out=out)
        )
    except SelfMindError as exc:
        raise _fail(str(exc)) from None
    except anthropic.APIError as exc:
        raise _fail(f"Claude API: {type(exc).__name__}: {exc}") from None
    raise typer.Exit(code)


async def _run(
    settings: Settings,
    convs: list[Conversation],
    sessions: int | None,
    models: list[str],
    judge_model: str | None,
    *,
    yes: bool,
    as_json: bool,
    out: Path | None,
) -> int:
    import anthropic

    from core.evaluation.estimate import estimate_run
    from core.evaluation.reflection_eval import FORMAT_VERSION, Checkpoint, totals
    from core.model.prices import PRICES_AS_OF, PRICES_SOURCE
    from core.runtime import open_store

    assert settings.anthropic_api_key is not None
    key = settings.anthropic_api_key.get_secret_value()
    client = anthropic.AsyncAnthropic(
        api_key=key,
        base_url=settings.anthropic_base_url,
        max_retries=settings.anthropic_max_retries,
        timeout=settings.anthropic_timeout_s,
    )
    header = {
        "format": FORMAT_VERSION,
        "conversations": [c.name for c in convs],
        "sessions": sessions,
        "judge_model": judge_model,
        "related_k": settings.reflection_related_k,
        "dedupe_threshold": settings.dedupe_threshold,
    }
    try:
        checkpoint = Checkpoint.open(out, header)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--out: {exc}") from None
    workdir = Path(tempfile.mkdtemp(prefix="selfmind-eval-")) if out is None else None
    reports: list[ModelReport] = []
    estimates: dict[str, Estimate] = {}
    try:
        for model in models:
            estimates[model] = await estimate_run(
                client=client,
                model=model,
                judge_model=judge_model,
                conversations=convs,
                sessions=sessions,
                related_k=settings.reflection_related_k,
            )
        _print_estimate(estimates, judge_model)
        if not yes:
            if not sys.stdin.isatty():
                raise ConfigError("not a terminal: pass --yes to start without confirming")
            if not typer.confirm("Start?", default=False):
                return 1
        stopped = False
        for model in models:
            db = (
                (workdir / "eval.db")
                if workdir is not None
                else out.with_name(f"{out.name}.{_slug(model)}.db")  # type: ignore[union-attr]
            )
            if workdir is not None and db.exists():
                db.unlink()
            store = await open_store(f"sqlite:///{db}")
            try:
                with _interrupts() as should_stop:
                    complete = await _one_model(
                        settings,
                        client,
                        store,
                        checkpoint,
                        convs,
                        sessions,
                        model,
                        judge_model,
                        should_stop,
                    )
                reports.append(
                    await totals(
                        model=model,
                        judge_model=judge_model,
                        checkpoint=checkpoint,
                        store=store,
                        conversations=convs,
                        complete=complete,
                    )
                )
            finally:
                await store.close()
            if not complete:
                stopped = True
                break
    finally:
        await client.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    for report in reports:
        _print_report(report)
    if stopped:
        where = f"run the same command again to resume from {out}" if out else "nothing kept"
        typer.echo(f"interrupted: {where}", err=True)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "prices_as_of": PRICES_AS_OF,
                    "prices_source": PRICES_SOURCE,
                    "estimate": {m: e.as_json() for m, e in estimates.items()},
                    "models": [r.as_json() for r in reports],
                    "complete": not stopped,
                },
                ensure_ascii=False,
            )
        )
    if stopped:
        return 130
    failed = [(r.model, r.total.failed, r.total.turns) for r in reports if r.total.failed]
    if failed:
        model, count, turns = failed[0]
        typer.echo(
            f"error: eval reflection: {count} of {turns} reflections with {model} failed after"
            " their retries (the failed column): the scores leave them out",
            err=True,
        )
        return 1
    return 0


async def _one_model(
    settings: Settings,
    client: anthropic.AsyncAnthropic,
    store: Store,
    checkpoint: Checkpoint,
    convs: list[Conversation],
    sessions: int | None,
    model: str,
    judge_model: str | None,
    should_stop: Any,
) -> bool:

    from core.evaluation.judge import Judge
    from core.evaluation.reflection_eval import EvalRun, unit_count
    from core.model.claude import ClaudeChatModel

    assert settings.anthropic_api_key is not None
    async with ClaudeChatModel(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        chat_model=model,
        reflection_model=model,
        max_tokens=settings.max_tokens,
        memory_max_tokens=settings.memory_max_tokens,
        max_retries=settings.anthropic_max_retries,
        timeout_s=settings.anthropic_timeout_s,
    ) as chat_model:
        run = EvalRun(
            model_name=model,
            model=chat_model,
            store=store,
            checkpoint=checkpoint,
            conversations=convs,
            sessions=sessions,
            judge=None if judge_model is None else Judge(client=client, model=judge_model),
            dedupe_threshold=settings.dedupe_threshold,
            related_k=settings.reflection_related_k,
            max_attempts=settings.reflection_max_attempts,
            should_stop=should_stop,
        )
        total = unit_count(convs, sessions)
        done = sum(1 for u in checkpoint.units if u.startswith(f"{model}|"))
        if not sys.stderr.isatty():
            return await run.run()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        columns = (BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*Progress.get_default_columns()[:1], *columns, transient=True) as bar:
            task = bar.add_task(f"{model}", total=total, completed=done)
            run.progress = lambda label, n: bar.update(
                task, advance=n, description=f"{model}: {label}"
            )
            return await run.run()


@contextmanager
def _interrupts() -> Iterator[Any]:
    """Ctrl-C asks the run to stop after the unit in progress; a second one kills it."""
    asked = {"stop": False}
    loop = asyncio.get_running_loop()

    def first() -> None:
        if asked["stop"]:
            raise KeyboardInterrupt
        asked["stop"] = True
        print("stopping after the current call (Ctrl-C again to abort)", file=sys.stderr)

    try:
        loop.add_signal_handler(signal.SIGINT, first)
        installed = True
    except (NotImplementedError, RuntimeError, ValueError):
        installed = False
    try:
        yield lambda: asked["stop"]
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _print_estimate(estimates: dict[str, Estimate], judge_model: str | None) -> None:
    from core.model.prices import PRICES_AS_OF, PRICES_SOURCE, price_of

    typer.echo(
        f"estimate (input tokens counted by the API; output tokens assumed; list prices as of"
        f" {PRICES_AS_OF}, {PRICES_SOURCE}):",
        err=True,
    )
    for model, e in estimates.items():
        assumed = [m for m in (model, judge_model) if m and (p := price_of(m)) and p.assumed]
        note = f" (price assumed for {', '.join(assumed)})" if assumed else ""
        typer.echo(
            f"  {model}: {e.reflection_calls} reflections, {e.reflection_input:,} input +"
            f" ~{e.reflection_output:,} output tokens; judge {judge_model or 'none'}:"
            f" {e.judge_calls} calls, {e.judge_input:,} input + ~{e.judge_output:,} output;"
            f" about {_money(e.cost(model=model, judge_model=judge_model))}{note}",
            err=True,
        )


def _names(names: list[str], limit: int = 8) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _print_report(report: ModelReport) -> None:
    from core.evaluation.scoring import OFFLINE_RULE
    from core.model.prices import PRICES_AS_OF

    data = report.as_json()
    scoring = f"judge {report.judge_model}" if report.judge_model else OFFLINE_RULE
    typer.echo(f"reflection model {report.model}; scoring: {scoring}")
    typer.echo(
        f"{'conversation':<14}{'turns':>7}{'memories':>10}{'per turn':>10}{'coverage':>10}"
        f"{'support':>9}{'other':>7}{'rejected':>10}{'dups':>6}{'supersedes':>12}{'failed':>8}"
    )
    for c in [*report.conversations, report.total]:
        typer.echo(
            f"{c.name:<14}{c.turns:>7}{c.added:>10}{c.memories_per_turn:>10.3f}"
            f"{_pct(c.coverage):>10}{_pct(c.support):>9}{c.from_other:>7}{c.rejected:>10}"
            f"{c.duplicates:>6}{c.superseded:>12}{c.failed:>8}"
        )
    per = data["per_100_turns"]
    r, j = per["reflection_tokens"], per["judge_tokens"]
    typer.echo(
        f"per 100 turns: reflection {r['input_tokens']:,} in + {r['cache_read_input_tokens']:,}"
        f" cache read + {r['output_tokens']:,} out = {_money(per['reflection_cost_usd'])};"
        f" judge {j['input_tokens']:,} in + {j['cache_read_input_tokens']:,} cache read +"
        f" {j['cache_creation_input_tokens']:,} cache write + {j['output_tokens']:,} out ="
        f" {_money(per['judge_cost_usd'])} (list prices as of {PRICES_AS_OF}; an estimate)"
    )
    typer.echo(f"by kind: {report.by_kind}  by category: {report.by_category}")
    typer.echo(
        f"negative suite: {report.negative.cases} cases, false-store rate"
        f" {_pct(report.false_store_rate)}"
        + (f" (stored in {_names(report.negative.failing)})" if report.negative.failing else "")
    )
    typer.echo(
        f"correction suite: {report.correction.cases} cases, supersede rate"
        f" {_pct(report.supersede_rate)}"
        + (
            f" (not superseded: {_names(report.correction.failing)})"
            if report.correction.failing
            else ""
        )
    )
