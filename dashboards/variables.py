"""The template variables every kmon dashboard shares, and the label selectors built on them.

Every dashboard has a Prometheus data source variable (``datasource``), a ``cluster``
variable and a ``broker`` variable, both read with ``label_values`` from a series every
broker exports. Queries match them with regular expressions (``=~"$cluster"``): Grafana
writes a multi-value selection as ``(a|b)`` and "All" as ``.*`` (the ``allValue`` set
here), and ``=~`` is anchored, so one selected broker matches that broker only.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm

from dashboards import metric_names as m

DATASOURCE_VAR = "datasource"
CLUSTER_VAR = "cluster"
BROKER_VAR = "broker"
REQUEST_VAR = "request"

# Panels and variables name the data source through the variable, so one dashboard
# works against whichever Prometheus the viewer picks.
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")

# The series the variables read their values from: present on every broker at all times.
_INVENTORY_METRIC = m.UNDER_REPLICATED

CLUSTER = f'cluster=~"${CLUSTER_VAR}"'
BROKERS = f'{CLUSTER}, broker=~"${BROKER_VAR}"'
# Drill-down: every broker of the chosen clusters other than the chosen one.
PEERS = f'{CLUSTER}, broker!~"${BROKER_VAR}"'


def datasource_variable() -> db.DatasourceVariable:
    return (db.DatasourceVariable(DATASOURCE_VAR).label("Data source").type("prometheus")
            .regex("").multi(False).include_all(False))


def cluster_variable(*, single: bool = False) -> db.QueryVariable:
    """Clusters that have brokers scraped; `single` for a drill-down into one broker."""
    var = (db.QueryVariable(CLUSTER_VAR).label("Cluster").datasource(DATASOURCE)
           .query(f"label_values({_INVENTORY_METRIC}, cluster)")
           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
           .sort(dm.VariableSort.ALPHABETICAL_ASC))
    if single:
        return var.multi(False).include_all(False)
    return var.multi(True).include_all(True).all_value(".*")


def broker_variable(*, single: bool = False) -> db.QueryVariable:
    """Brokers of the chosen clusters; `single` for a drill-down into one broker."""
    var = (db.QueryVariable(BROKER_VAR).label("Broker").datasource(DATASOURCE)
           .query(f"label_values({_INVENTORY_METRIC}{{{CLUSTER}}}, broker)")
           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
           .sort(dm.VariableSort.NUMERICAL_ASC))
    if single:
        return var.multi(False).include_all(False)
    return var.multi(True).include_all(True).all_value(".*")


def request_variable() -> db.QueryVariable:
    """Request types (Produce, Fetch, FetchFollower, ...) the chosen brokers have timed."""
    return (db.QueryVariable(REQUEST_VAR).label("Request").datasource(DATASOURCE)
            .query(f"label_values({m.TOTAL.count}{{{BROKERS}}}, request)")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(dm.VariableOption(selected=True, text=["Produce", "Fetch"],
                                       value=["Produce", "Fetch"])))


def standard_variables(*, single_broker: bool = False) -> list:
    """Data source, cluster, broker; a single-broker drill-down picks one cluster too (broker
    ids repeat across clusters)."""
    return [datasource_variable(), cluster_variable(single=single_broker),
            broker_variable(single=single_broker)]
