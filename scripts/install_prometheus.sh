#!/bin/sh
# Installs Debian's prometheus for the metrics test without starting its service: a
# policy-rc.d that denies every start (exit 101) is in place while apt-get runs, unless
# the host already has one of its own. The test runs /usr/bin/prometheus itself.
set -eu
made=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  made=1
fi
status=0
{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || status=$?
if [ -n "$made" ]; then rm -f /usr/sbin/policy-rc.d; fi
exit "$status"
