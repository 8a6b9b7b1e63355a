# Sourced with a bundle's unpacked payload directory: `. mpi-env.sh PAYLOAD`. Puts the
# bundle's OpenMPI launcher (payload mpi/, made by bundle.sh from the build machine's
# OpenMPI 4.1 and PMIx 4) first on PATH and points OpenMPI and PMIx at its components, help
# texts and parameter files, so mpirun works on a machine without OpenMPI installed (the GPU
# machine has no Debian packages) and never reads an installed one. The variables are
# OpenMPI 4.1's installdirs overrides (opal/mca/installdirs/env) and PMIx's (pinstalldirs/env);
# the component paths are set as MCA parameters too, since Debian's build fixes them at
# configure time and its PMIx parameter file names its own directory.
_mpi=$1/mpi
if [ -x "$_mpi/bin/mpirun" ]; then
  # Its programs and components find the bundle's libraries through their RUNPATH (bundle.sh).
  export PATH="$_mpi/bin:$PATH"
  export OPAL_PREFIX="$_mpi" OPAL_EXEC_PREFIX="$_mpi" OPAL_BINDIR="$_mpi/bin" OPAL_LIBDIR="$1/lib" \
    OPAL_PKGLIBDIR="$_mpi/lib/openmpi" OPAL_DATAROOTDIR="$_mpi/share" OPAL_DATADIR="$_mpi/share" \
    OPAL_PKGDATADIR="$_mpi/share/openmpi" OPAL_SYSCONFDIR="$_mpi/etc" OPAL_LIBEXECDIR="$_mpi/bin"
  export OMPI_MCA_mca_base_component_path="$_mpi/lib/openmpi"
  export PMIX_PREFIX="$_mpi" PMIX_INSTALL_PREFIX="$_mpi" PMIX_EXEC_PREFIX="$_mpi" PMIX_LIBDIR="$1/lib" \
    PMIX_PKGLIBDIR="$_mpi/lib/pmix" PMIX_DATAROOTDIR="$_mpi/share" PMIX_DATADIR="$_mpi/share" \
    PMIX_PKGDATADIR="$_mpi/share/pmix" PMIX_SYSCONFDIR="$_mpi/etc" PMIX_BINDIR="$_mpi/bin"
  export PMIX_MCA_mca_base_component_path="$_mpi/lib/pmix"
  # hwloc's plugins (PCI, CUDA, ...) are not carried: topology detection needs none.
  export HWLOC_PLUGINS_PATH="$_mpi/lib/hwloc"
  # The GPU machine runs commands as root, which Open MPI refuses unless told twice.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
unset _mpi
