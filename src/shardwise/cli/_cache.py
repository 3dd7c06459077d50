"""``shardwise cache verify|clear``: check or empty a node-local unit cache."""

from __future__ import annotations

import click

from shardwise.cli._app import EXIT_ERROR, cli, human_bytes


@cli.group()
def cache() -> None:
    """Check or empty a node-local unit cache (the cache_dir given to StreamingDataset)."""


@cache.command("verify")
@click.argument("directory")
@click.option("--keep", is_flag=True, help="Only report bad entries; do not delete them.")
def cache_verify(directory: str, keep: bool) -> None:
    """Check every entry of DIRECTORY (record, length, checksum); delete bad ones. Exits 1
    when a bad entry was found."""
    from shardwise.storage.cache.admin import verify_cache

    report = verify_cache(directory, remove=not keep)
    for path, reason in report.bad:
        click.echo(f"bad: {path}: {reason}")
    click.echo(
        f"{report.checked} entries checked, {len(report.bad)} bad, {report.removed} removed, "
        f"{report.stale} leftovers of dead processes removed"
    )
    if report.bad:
        raise click.exceptions.Exit(EXIT_ERROR)


@cache.command("clear")
@click.argument("directory")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also remove entries a running process leases (it keeps what it already read).",
)
def cache_clear(directory: str, everything: bool) -> None:
    """Remove the entries of DIRECTORY that no running process reads."""
    from shardwise.storage.cache.admin import clear_cache

    report = clear_cache(directory, all=everything)
    click.echo(
        f"removed {report.removed} entries ({human_bytes(report.removed_bytes)}); "
        f"kept {report.kept_leased} in use"
    )
