"""What a child inherits from the loop's environment: everything but the keys to the store.

SPEC §9, "secrets stay with cronctl": the loop may hold the store's URL (with its
password) in $CRONCTL_STORE, or libpq's own variables ($PGPASSWORD, $PGPASSFILE,
$PGSERVICE ...). Inherited by every job, they would put the password in job logs, run
tails and `cronctl logs` on every host, and let any job rewrite the scheduler's tables.
So they are dropped from what a child inherits. A job that needs one of them for its
own database sets it in its `env:` (applied after this), where it is visible and meant.
"""

from __future__ import annotations

from collections.abc import Mapping

# Everything that opens cronctl's store: its URL ...
STORE_VARIABLES = frozenset({"CRONCTL_STORE"})

# ... and libpq's connection variables (the "Environment Variables" page of libpq's
# documentation): any of them may carry the password, or say where to find it
# (a password file, a service file), or complete a URL that leaves fields out.
# Session defaults that open nothing (PGDATESTYLE, PGTZ, PGGEQO) are left alone.
LIBPQ_VARIABLES = frozenset({
    "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE",
    "PGSERVICE", "PGSERVICEFILE", "PGSYSCONFDIR", "PGREQUIREAUTH", "PGCHANNELBINDING",
    "PGOPTIONS", "PGAPPNAME", "PGSSLMODE", "PGREQUIRESSL", "PGSSLNEGOTIATION", "PGSSLCOMPRESSION",
    "PGSSLCERT", "PGSSLKEY", "PGSSLCERTMODE", "PGSSLROOTCERT", "PGSSLCRL", "PGSSLCRLDIR", "PGSSLSNI",
    "PGREQUIREPEER", "PGSSLMINPROTOCOLVERSION", "PGSSLMAXPROTOCOLVERSION", "PGMINPROTOCOLVERSION",
    "PGMAXPROTOCOLVERSION", "PGGSSENCMODE", "PGKRBSRVNAME", "PGGSSLIB", "PGGSSDELEGATION",
    "PGCONNECT_TIMEOUT", "PGCLIENTENCODING", "PGTARGETSESSIONATTRS", "PGLOADBALANCEHOSTS",
})
# Variables of libpq's future versions that carry keys or certificates start so.
_LIBPQ_PREFIXES = ("PGSSL", "PGGSS", "PGOAUTH")

WITHHELD = STORE_VARIABLES | LIBPQ_VARIABLES


def is_withheld(name: str) -> bool:
    return name in WITHHELD or name.startswith(_LIBPQ_PREFIXES)


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The loop's environment as a child inherits it: without what opens the store."""
    return {key: value for key, value in environ.items() if not is_withheld(key)}
