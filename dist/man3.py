#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write a man(3) page per function of the public headers, from their
kernel-doc comments (the kernel's scripts/kernel-doc -man, section 9 pages
in one stream), as section-3 pages of the NELSSA library that exports the
function, with the header to include and the pkg-config name to link.

  man3.py KERNEL-DOC OUTDIR VERSION HEADER=PKG...
"""
import os
import re
import subprocess
import sys


def pages(kernel_doc, header):
    out = subprocess.run(['perl', kernel_doc, '-man', header], check=True,
                         capture_output=True, text=True).stdout
    page = []
    for line in out.splitlines():
        if line.startswith('.TH ') and page:
            yield page
            page = []
        page.append(line)
    if page:
        yield page


def main():
    kernel_doc, outdir, version = sys.argv[1:4]
    for arg in sys.argv[4:]:
        header, pkg = arg.rsplit('=', 1)
        include = 'nelssa/' + os.path.basename(header)
        for page in pages(kernel_doc, header):
            name = re.match(r'\.TH "([^"]+)"', page[0]).group(1)
            if not re.fullmatch(r'(nelssa|npnm)_[a-z0-9_]+', name):
                continue        # structs and enums: in the header's pages
            body = ['.TH "%s" 3 "" "NELSSA %s" "NELSSA Library Functions"' % (name, version)]
            for line in page[1:]:
                body.append(line)
                if line == '.SH SYNOPSIS':
                    body.append('.B #include <%s>' % include)
                    body.append('.br')
                    body.append('.sp')
            body += ['.SH LIBRARY',
                     'lib%s (\\fIpkg-config \\-\\-cflags \\-\\-libs %s\\fR)' % (pkg, pkg),
                     '.SH SEE ALSO',
                     'The NELSSA documentation: Documentation/libraries.rst and the page of %s.'
                     % include]
            with open(os.path.join(outdir, name + '.3'), 'w') as f:
                f.write('\n'.join(body) + '\n')


if __name__ == '__main__':
    main()
