"""Writes a file's bytes as a C++ array (the WebUI page built into ftllmd): embed.py INPUT OUTPUT SYMBOL."""
import sys

data = open(sys.argv[1], "rb").read()
symbol = sys.argv[3]
rows = [", ".join(str(b) for b in data[i:i + 32]) for i in range(0, len(data), 32)]
with open(sys.argv[2], "w") as out:
    out.write("// Generated from %s by daemon/webui/embed.py at build time; do not edit.\n" % sys.argv[1].split("/")[-1])
    out.write("#include <cstddef>\n\nnamespace ftllm::daemon {\n\n")
    out.write("extern const unsigned char %s[] = {\n  %s};\n" % (symbol, ",\n  ".join(rows)))
    out.write("extern const std::size_t %s_size = %d;\n\n}  // namespace ftllm::daemon\n" % (symbol, len(data)))
