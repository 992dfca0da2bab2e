#!/usr/bin/env python3
"""Rewrites a CUDA source for the simulator (tests/cudasim/README.md): each launch
`kernel<<<grid, block, shared, stream>>>(args)` becomes
`::ftllm_sim::Launch("kernel", grid, block, shared, stream).run(kernel, args)`, and each
`extern __shared__ T name[];` becomes a pointer to the block's dynamic shared memory, and each
`__shared__ T name[N];` is followed by a call that gives it NaN bytes in every new block. Quoted includes
are made absolute, since the rewritten file lives in the build tree. Everything else is left as
written, and #line keeps compiler messages pointing at the original file."""
import os
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(', re.S)
DYNAMIC_SHARED = re.compile(r'extern\s+__shared__\s+([\w:]+)\s+(\w+)\s*\[\s*\]\s*;')
STATIC_SHARED = re.compile(r'__shared__\s+([\w:]+)\s+(\w+)\s*\[([^\]]+)\]\s*;')
QUOTED_INCLUDE = re.compile(r'^(\s*#\s*include\s+)"([^"]+)"', re.M)


def hostify(text, source_dir):
    text = QUOTED_INCLUDE.sub(lambda m: '%s"%s"' % (m.group(1), os.path.normpath(os.path.join(source_dir, m.group(2)))),
                              text)
    text = DYNAMIC_SHARED.sub(r'\1* \2 = static_cast<\1*>(::ftllm_sim::dynamic_shared());', text)
    text = STATIC_SHARED.sub(r'__shared__ \1 \2[\3]; ::ftllm_sim::fresh_shared(\2, sizeof(\2));', text)
    return LAUNCH.sub(lambda m: '::ftllm_sim::Launch("%s", %s).run(%s, ' % (m.group(1), m.group(2), m.group(1)), text)


def main():
    source, output = sys.argv[1], sys.argv[2]
    with open(source) as f:
        text = f.read()
    rewritten = hostify(text, os.path.dirname(os.path.abspath(source)))
    if '<<<' in rewritten:
        sys.exit('hostify: a launch in %s was not understood' % source)
    with open(output, 'w') as f:
        f.write('#line 1 "%s"\n' % source + rewritten)


if __name__ == '__main__':
    main()
