"""`crossbeat gateway`: serve S3 from a data directory."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from crossbeat.cli.datadir_lock import hold_data_dir
from crossbeat.config import load_toml, section_settings
from crossbeat.errors import CrossbeatError


@click.command()
@click.option("--data-dir", type=click.Path(path_type=Path), help="Where metadata and data live.")
@click.option("--listen", help="HOST:PORT to bind (port 0 picks a free port).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="crossbeat.toml")
@click.option("--tls-cert", type=click.Path(path_type=Path), help="PEM certificate: serve https")
@click.option("--tls-key", type=click.Path(path_type=Path), help="PEM private key")
@click.option("--site", help="This site's name (replication destinations name sites).")
def gateway(
    data_dir: Path | None,
    listen: str | None,
    config_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    site: str | None,
) -> None:
    """Serve the S3 API; every metadata change lands in the journal."""
    from crossbeat.s3.credentials import principals, root_principal
    from crossbeat.s3.server import run_gateway
    from crossbeat.s3.settings import GatewaySettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = section_settings(
            GatewaySettings, load_toml(config_file), "gateway",
            data_dir=data_dir, listen=listen, tls_cert=tls_cert, tls_key=tls_key, site=site,
        )
        _check_tls(settings.tls_cert, settings.tls_key)
        _lock = hold_data_dir(Path(settings.data_dir), "gateway")  # held while we serve
        root, generated = root_principal(settings)
    except (CrossbeatError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if generated:
        click.echo(f"generated root credentials: access key {root.access_key} secret key {root.secret_key}")
        click.echo(f"(kept in {Path(settings.data_dir) / 'root-credentials.json'})")
    try:
        code = run_gateway(
            settings,
            principals(settings, root),
            lambda url: print(f"crossbeat gateway listening on {url}", flush=True),
        )
    except (CrossbeatError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    raise SystemExit(code)


def _check_tls(cert: Path | None, key: Path | None) -> None:
    """Both or neither, and loadable, before anything is announced: a certificate without
    its key served plain http, and a bad pair was found only by the workers, after
    "listening on https://" had been printed."""
    if cert is None and key is None:
        return
    if cert is None or key is None:
        raise click.ClickException("--tls-cert and --tls-key (tls_cert, tls_key) go together")
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise click.ClickException(f"cannot use TLS certificate {cert} with key {key}: {exc}") from exc
    warning = certificate_warning(cert)
    if warning:
        click.echo(f"warning: {warning}", err=True)


# a certificate this close to its end is named at start, while there is time to renew it
EXPIRY_WARNING_DAYS = 14


def certificate_warning(cert: Path, now: float | None = None) -> str | None:
    """Why the (loadable) certificate in `cert` will be refused by clients, or soon will:
    expired, not valid yet, or expiring within EXPIRY_WARNING_DAYS. It is served anyway
    (as nginx does): the operator may be about to replace it, and a self-signed test
    certificate is not ours to judge. None when it is fine or cannot be read here."""
    import ssl
    import time

    try:
        # CPython's own certificate decoder (what its test suite uses): no extra dependency
        decoded = ssl._ssl._test_decode_cert(str(cert))  # type: ignore[attr-defined]
        not_before = ssl.cert_time_to_seconds(decoded["notBefore"])
        not_after = ssl.cert_time_to_seconds(decoded["notAfter"])
    except (AttributeError, KeyError, OSError, ValueError, ssl.SSLError):
        return None
    now = time.time() if now is None else now
    if now >= not_after:
        return (f"TLS certificate {cert} expired on {decoded['notAfter']}: clients that check "
                "certificates will refuse every connection")
    if now < not_before:
        return (f"TLS certificate {cert} is not valid before {decoded['notBefore']}: clients that "
                "check certificates will refuse every connection until then")
    if not_after - now < EXPIRY_WARNING_DAYS * 86400:
        return f"TLS certificate {cert} expires on {decoded['notAfter']}"
    return None
