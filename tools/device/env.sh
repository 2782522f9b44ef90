# tools/device/env.sh: sourced by the device scripts. Unpacks the Debian -dev packages
# carried in .devdeps (DEVICE.md) and points the compiler and pkg-config at them.
if [ -d .devdeps ]; then
  mkdir -p /tmp/deps && for f in .devdeps/*.deb; do dpkg -x "$f" /tmp/deps; done
  export PKG_CONFIG_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig CPATH=/tmp/deps/usr/include \
         LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu
  # libmicrohttpd.pc requires gnutls.pc; the machine has GnuTLS's runtime library only
  if ! pkg-config --exists gnutls; then
    printf 'Name: gnutls\nDescription: stub (runtime library only)\nVersion: 3.8.3\nLibs:\nCflags:\n' \
      > /tmp/deps/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc
  fi
fi
