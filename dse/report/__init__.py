"""Dashboards: pure ``*_info()`` data functions, thin plotly renderers, one offline HTML page."""

from dse.report.dashboard import DashboardInfo, dashboard_html, dashboard_info, write_dashboard
from dse.report.failures import FailureGroup, FailuresInfo, failures_info
from dse.report.front_table import front_table_info
from dse.report.info import (
    AxisInfo,
    ParetoScatterInfo,
    PointGroup,
    axis_title,
    hover_texts,
    pareto_scatter_info,
)
from dse.report.parallel import Dimension, ParallelCoordinatesInfo, parallel_coordinates_info
from dse.report.summary import SummaryInfo, status_counts, summary_info
from dse.report.table_info import TableInfo

__all__ = [
    "AxisInfo",
    "DashboardInfo",
    "Dimension",
    "FailureGroup",
    "FailuresInfo",
    "ParallelCoordinatesInfo",
    "ParetoScatterInfo",
    "PointGroup",
    "SummaryInfo",
    "TableInfo",
    "axis_title",
    "dashboard_html",
    "dashboard_info",
    "failures_info",
    "front_table_info",
    "hover_texts",
    "parallel_coordinates_info",
    "pareto_scatter_info",
    "status_counts",
    "summary_info",
    "write_dashboard",
]
