"""The store seams and the logic the backends share; one sub-package per backend. Never
imports memory/ or chat/.
"""
