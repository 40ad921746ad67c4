"""Print where python3 looks for pure modules installed under PREFIX.

    python3 purelib.py PREFIX

Debian's python3 reads /usr/local/lib/python3.X/dist-packages for
/usr/local and /usr/lib/python3/dist-packages for /usr (its default
scheme, posix_local); other systems and prefixes use the posix_prefix
scheme's site-packages below PREFIX.
"""
import os
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else ""
if scheme == "posix_local" and prefix == "/usr/local":
    print(sysconfig.get_path("purelib"))
elif scheme == "posix_local" and prefix == "/usr":
    print("/usr/lib/python3/dist-packages")
else:
    print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix,
                                                               "platbase": prefix}))
