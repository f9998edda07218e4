# kind's base image ("kindest/base") rebuilt offline: a debootstrapped Debian bookworm rootfs
# (imported as BASE_OS), kind's own images/base/files from the kind module, and the node binaries
# built from the Go module proxy by tools/kind/build-node-bins.sh. Steps follow kind's
# images/base/Dockerfile. Built by tools/kind/build-node-image.sh (legacy builder: no --chmod).
ARG BASE_OS
FROM ${BASE_OS}
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY bin/ /usr/local/bin/
COPY runc /usr/local/sbin/runc
COPY cni/ /opt/cni/bin/
RUN chmod 0755 /usr/local/bin/* /kind/bin/* /usr/local/sbin/runc /opt/cni/bin/* \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* \
 && rm -f /etc/systemd/system/*.wants/* \
 && rm -f /lib/systemd/system/local-fs.target.wants/* \
 && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
 && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
 && rm -f /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests \
 && ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && containerd --version && runc --version && crictl --version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
