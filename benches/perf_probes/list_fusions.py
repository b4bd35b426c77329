"""List the kernels (fusions) of an optimized HLO module with the jax op names they came from."""
import re, sys, collections
def kernels(hlo: str):
    comps = {}
    cur = None
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
        if m: cur = m.group(1); comps[cur] = []; continue
        if cur: comps[cur].append(line)
    out = []
    for name, lines in comps.items():
        for l in lines:
            m = re.search(r"= (\S+) fusion\(.*calls=%([\w.\-]+)", l)
            if m:
                body = comps.get(m.group(2), [])
                ops = [re.search(r"= \S+ ([a-z\-]+)\(", b) for b in body]
                ops = [o.group(1) for o in ops if o and o.group(1) not in ("parameter", "constant", "bitcast")]
                names = re.findall(r'op_name="([^"]+)"', l) + [n for b in body for n in re.findall(r'op_name="([^"]+)"', b)]
                short = sorted({n.split("/")[-1].split(";")[0] for n in names})
                out.append((name, m.group(1), ",".join(ops[:6]), " ".join(short[:4])))
    return out
if __name__ == "__main__":
    ks = kernels(open(sys.argv[1]).read())
    for k in ks: print(*k, sep=" | ")
    print(len(ks), "kernels")
