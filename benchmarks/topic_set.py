"""A labelled topic set from a folder of Markdown documentation: each paragraph of prose is an
example, labelled by the file it comes from (Node.js API docs: `fs`, `http`, `crypto`, ...).

It is the topic task the defaults were tuned on (docs/quality.md): pretrain on the docs folder,
then fine-tune on its paragraphs by module, beside a TF-IDF row. Nothing is downloaded; the
text comes from the folder given, so the set is not part of this repository:

    python benchmarks/topic_set.py /usr/share/doc/nodejs/api --out topics.jsonl
    python benchmarks/quality.py --source /usr/share/doc/nodejs/api \\
        --set finetune.data=$PWD/topics.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path

# The ten Node.js modules of the measured set; another folder takes its own with --files.
NODE_MODULES = ("fs", "http", "crypto", "stream", "child_process", "buffer", "net",
                "worker_threads", "events", "url")
MARKUP_LINES = ("#", "*", "|", ">", "[")  # headings, lists, tables, quotes, link definitions


def paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of a Markdown text, 8..120 words each, markup removed (code
    blocks, comments, headings, lists and tables dropped; inline code and links kept as
    text). The module's own name stays in, as a news article keeps its topic's words."""
    text = re.sub(r"```.*?```", "\n\n", markdown, flags=re.S)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    found = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()
                 if not line.lstrip().startswith(MARKUP_LINES)]
        para = re.sub(r"`([^`]*)`", r"\1", " ".join(lines))
        para = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", para)
        para = re.sub(r"\s+", " ", para).strip()
        if 8 <= len(para.split()) <= 120:
            found.append(para)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("docs", type=Path, help="a folder of NAME.md files")
    parser.add_argument("--files", nargs="+", default=list(NODE_MODULES),
                        help="the NAMEs (labels) to take (default: ten Node.js modules)")
    parser.add_argument("--out", type=Path, required=True, help="the .jsonl to write")
    parser.add_argument("--seed", type=int, default=0, help="shuffles the rows")
    args = parser.parse_args()

    rows = [{"text": para, "label": name} for name in args.files
            for para in paragraphs((args.docs / f"{name}.md").read_text(encoding="utf-8"))]
    random.Random(args.seed).shuffle(rows)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    counts = Counter(row["label"] for row in rows)
    print(f"{len(rows)} paragraphs -> {args.out}: " + ", ".join(f"{k} {v}" for k, v in
                                                                  counts.most_common()))


if __name__ == "__main__":
    main()
