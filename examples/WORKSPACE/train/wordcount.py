"""Count the words of a text file: `wordcount.py IN OUT` (the count_words job's binary)."""

import collections
import sys


def main() -> int:
    src, dest = sys.argv[1], sys.argv[2]
    with open(src) as f:
        counts = collections.Counter(f.read().split())
    with open(dest, "w") as out:
        for word, n in counts.most_common():
            out.write(f"{n}\t{word}\n")
    print(f"{sum(counts.values())} words, {len(counts)} distinct; top: {counts.most_common(3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
